//! What goes into the engine (inputs), what it records (events) and what it asks
//! the adapters to do (effects).

use super::state::{DecisionEntry, DispatchId, OperationId};
use super::EngineConfig;
use crate::plan::{Plan, SprintId};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelTier {
    Haiku,
    Sonnet,
    Opus,
}

impl ModelTier {
    pub const ALL: [ModelTier; 3] = [ModelTier::Haiku, ModelTier::Sonnet, ModelTier::Opus];

    pub fn as_str(self) -> &'static str {
        match self {
            ModelTier::Haiku => "haiku",
            ModelTier::Sonnet => "sonnet",
            ModelTier::Opus => "opus",
        }
    }

    pub fn stronger(self) -> ModelTier {
        match self {
            ModelTier::Haiku => ModelTier::Sonnet,
            _ => ModelTier::Opus,
        }
    }
}

/// Why a dispatch went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchKind {
    Fresh,
    Continuation,
    Retry,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    /// No output for the stall timeout (§9 unresponsive agent).
    Stalled,
    /// §10 phase 3: the drain timed out.
    StopTimeout,
    /// §11.
    Killall,
    /// The attempt ran past `max_agent_secs`.
    WallClock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CriterionOutcome {
    Passed,
    Failed,
    /// Not machine-checkable (a checklist item): a person must confirm it.
    Unverified,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriterionResult {
    pub line: usize,
    pub text: String,
    pub outcome: CriterionOutcome,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// A failing command criterion and the end of what it printed (already
/// scrubbed when the attempt was recorded), bounded: what a person needs to
/// see why a sprint failed without opening the attempt's result file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedCheck {
    pub criterion: String,
    pub output: String,
}

impl FailedCheck {
    /// Lines of output kept: a traceback's end, not a whole log.
    pub const LINES: usize = 15;
    /// Bytes kept, whatever the lines.
    pub const BYTES: usize = 1200;

    /// The first failing command criterion of `sprint` among `results`
    /// that printed something.
    pub fn of(sprint: &crate::plan::Sprint, results: &[CriterionResult]) -> Option<FailedCheck> {
        results
            .iter()
            .filter(|r| r.outcome == CriterionOutcome::Failed && !r.detail.trim().is_empty())
            .find(|r| {
                sprint
                    .exit_criteria
                    .iter()
                    .any(|c| c.text == r.text && c.command.is_some())
            })
            .map(|r| FailedCheck {
                criterion: r.text.clone(),
                // Printed by code an agent touched: nothing a reader
                // cannot see goes on to a terminal, a comment or a prompt.
                output: bounded_tail(
                    &crate::text::for_terminal(&r.detail),
                    Self::LINES,
                    Self::BYTES,
                ),
            })
    }

    /// The check as plain text: the criterion, then its output indented.
    pub fn quoted(&self) -> String {
        let body: Vec<String> = self.output.lines().map(|l| format!("    {l}")).collect();
        format!(
            "The failing check, {}, printed (last lines):\n{}",
            self.criterion,
            body.join("\n")
        )
    }
}

/// The last `lines` lines of `text`, at most `bytes` of them, cut at a
/// character boundary; trailing blank lines dropped.
pub fn bounded_tail(text: &str, lines: usize, bytes: usize) -> String {
    let trimmed = text.trim_end();
    let kept: Vec<&str> = trimmed.lines().rev().take(lines).collect();
    let joined = kept.into_iter().rev().collect::<Vec<_>>().join("\n");
    let mut start = joined.len().saturating_sub(bytes);
    while !joined.is_char_boundary(start) {
        start += 1;
    }
    joined[start..].to_string()
}

/// What a progress file (PROGRESS.md and the like) says about the sprint (§5c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgressMarker {
    Complete,
    Partial,
}

/// Ground truth the adapter gathered after the agent exited (§5b–§5e).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Commits on the sprint branch since the dispatch (short hashes).
    pub commits: Vec<String>,
    /// Paths with uncommitted changes in the agent's checkout.
    pub uncommitted: Vec<String>,
    pub progress: Option<ProgressMarker>,
    /// `supervise verify` results, one per exit criterion.
    pub criteria: Vec<CriterionResult>,
    /// The repository's own CI on the sprint's head, when known.
    pub ci_passed: Option<bool>,
    /// Where that CI failed: per failing check, what it said (scrubbed and
    /// bounded by the place) — quoted to the next agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ci_failures: Vec<CiFailure>,
    /// The sprint branch does not merge cleanly into the integration branch.
    pub merge_conflict: Option<String>,
    /// What the agent handed back (`$SUPERVISE_RESULT_FILE`, or the file the
    /// workflow names): a workflow reads its next step from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    /// Why the trusted step refused the agent's work without checking it
    /// (it changed the exit criteria, the supervisor's records or the
    /// workflows): the attempt fails, whatever the agent said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The place found the sprint's work already on the head the attempt
    /// was to start from, and launched no agent: `criteria` are the checks
    /// made there. The engine accepts it only on evidence (see
    /// [`crate::engine::done_before::work_is_there`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_done: Option<FoundDone>,
}

/// Why a place launched no agent for a fresh sprint: what it found on the
/// head the sprint would start from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundDone {
    /// The head checked (a commit id).
    pub head: String,
    /// Who did the work, for people: `commit 3f2a1b0 ("add both lamps"),
    /// merged by "Merge lamp Sprint 1 (…)"`.
    pub by: String,
    /// Command criteria (their text) that failed at the operation's
    /// starting commit: a command passing now is evidence only then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_at_start: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentReport {
    pub exit_code: Option<i32>,
    /// The end of the agent's output (§5a looks for signal words there).
    pub output_tail: String,
    pub turns_used: Option<u32>,
    /// What the agent's CLI reported the run used (tokens, dollars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::usage::Usage>,
    pub evidence: Evidence,
}

/// Where a failing build gate's failure came in: found by running the gate
/// on the integration branch before the phase's merges and at each of them.
/// A place that cannot look says `Unknown`, and the failure is charged to
/// the units its output names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GateBlame {
    #[default]
    Unknown,
    /// The gate fails before any of the phase's merges as well: none of them
    /// broke it.
    BeforePhase,
    /// The gate passed before this sprint's merge and fails after it.
    Merge { unit: String, sprint: SprintId },
}

/// Everything that can happen to an operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "input", rename_all = "snake_case")]
pub enum Input {
    Start {
        operation: OperationId,
        plan: Box<Plan>,
        config: EngineConfig,
        seed: u64,
        /// The rule that adds work as the operation goes, for work without a
        /// written plan (the plan then holds its first units).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workflow: Option<Box<super::workflow::Workflow>>,
        /// §3 steps 4–5: sprints found already done before the operation
        /// (progress files and the project's state are ground truth).
        already_done: Vec<AlreadyDone>,
    },
    Resume {
        unit: Option<String>,
    },
    /// A person raises (or sets) the running operation's budgets: each
    /// given one replaces the one it started with. `resume --budget`, or
    /// `/supervise budget`.
    SetBudget {
        #[serde(default)]
        budget: Option<u64>,
        #[serde(default)]
        budget_usd: Option<crate::engine::usage::Usd>,
    },
    Stop,
    Killall,
    Status,
    NameFeature,
    AgentStarted {
        dispatch: DispatchId,
    },
    AgentActivity {
        dispatch: DispatchId,
    },
    AgentFinished {
        dispatch: DispatchId,
        report: AgentReport,
    },
    /// The runner may not launch the agent yet: a cap above the operation (a
    /// daily budget, agents in flight across operations) is reached. The
    /// attempt waits, its clocks stopped, until [`Input::DispatchReleased`].
    DispatchHeld {
        dispatch: DispatchId,
        /// Why, for people: which cap, how much is spent.
        reason: String,
        /// When the cap should allow it, if known.
        until: Option<DateTime<Utc>>,
        /// Which cap.
        kind: HoldKind,
    },
    /// A held dispatch was launched after all: its clocks start now.
    DispatchReleased {
        dispatch: DispatchId,
    },
    /// The runner could not launch the agent at all (not an attempt of the agent).
    DispatchFailed {
        dispatch: DispatchId,
        error: String,
    },
    Tick,
    GateResult {
        gate: u32,
        passed: bool,
        output: String,
        /// Where a failure came in, as far as the place could tell.
        #[serde(default)]
        blame: GateBlame,
    },
    ConditionPolled {
        unit: String,
        sprint: SprintId,
        met: bool,
        error: Option<String>,
        /// The exit criteria as checked by this poll: the evidence a met
        /// condition completes the sprint with.
        #[serde(default)]
        criteria: Vec<CriterionResult>,
    },
    ManualConfirmed {
        unit: String,
        sprint: SprintId,
    },
    /// The sprint's verified branch is now in the integration branch.
    Integrated {
        unit: String,
        sprint: SprintId,
    },
    /// The sprint's branch cannot be merged without a person (a conflict, a
    /// branch moved after verification, a pull request gone).
    IntegrationFailed {
        unit: String,
        sprint: SprintId,
        error: String,
    },
    /// Work that appears while the operation runs (a phase workflow's
    /// generated plan, a manager's next task): units appended to the plan,
    /// each with its sprints and dependencies on units old or new. Recorded
    /// and replayed like every other input, so one engine runs written plans
    /// and work that arrives later alike.
    AddWork {
        units: Vec<crate::plan::WorkUnit>,
    },
    /// Every machine-checkable criterion of every completed sprint, run
    /// again on the final integration head once the last unit completed
    /// (the head a person will merge): the operation's verdict is about it.
    HeadVerified {
        verification: HeadVerification,
    },
    /// The runner found a COMPLETED sprint's merge missing from the integration
    /// branch (something moved the branch back): its work must be redone.
    MergeLost {
        unit: String,
        sprint: SprintId,
        detail: String,
    },
    /// A person who may write asked for changes to a sprint's verified work
    /// (a review of its pull request; `supervise review` locally): a fix
    /// round on its branch, or batched into the next one while a round runs.
    ChangesRequested {
        unit: String,
        sprint: SprintId,
        review: ReviewFeedback,
    },
    /// A person who may write asked for changes on the final pull request
    /// (the whole operation's work): a "review fixes" unit on the
    /// integration branch, after which the whole plan is verified again.
    FinalChangesRequested {
        review: ReviewFeedback,
    },
}

/// One review asking for changes, as its reviewer wrote it: untrusted text,
/// quoted to the agent as data (see [`super::prompt`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewFeedback {
    /// Unique where the review came from (GitHub's review id, `local-…`): a
    /// review told twice starts one round.
    pub id: String,
    pub reviewer: String,
    /// The head it reviewed (a commit id), where known: what changed since
    /// is what the fix round did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub commit: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comments: Vec<ReviewComment>,
}

/// A comment on one line of the diff, with the hunk it was written against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewComment {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hunk: String,
    pub body: String,
}

impl ReviewComment {
    /// `src/lib.rs:12`, or the path alone for a comment on a whole file.
    pub fn place(&self) -> String {
        match self.line {
            Some(l) => format!("{}:{l}", self.path),
            None => self.path.clone(),
        }
    }
}

/// The final head's re-verification.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadVerification {
    /// The branch whose head was checked: where a person mends what fails.
    pub branch: String,
    /// The head checked (a commit id).
    pub head: String,
    pub checks: Vec<HeadCheck>,
}

impl HeadVerification {
    /// The checks that fail on the head.
    pub fn failures(&self) -> impl Iterator<Item = &HeadCheck> {
        self.checks
            .iter()
            .filter(|c| c.result.outcome == CriterionOutcome::Failed)
    }
}

/// One criterion of one sprint, as it ran on the final head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadCheck {
    pub unit: String,
    pub sprint: SprintId,
    pub result: CriterionResult,
    /// For a criterion that fails on the head: the first merge on the
    /// integration branch after which it failed (found by bisecting its
    /// merges), as `abc1234 ("Merge web Sprint 2 (…)")`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broken_by: Option<String>,
}

/// Why a dispatch waits to be launched, and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub reason: String,
    pub until: Option<DateTime<Utc>>,
    #[serde(default)]
    pub kind: HoldKind,
}

/// Which cap above the operation holds a dispatch: people are told once per
/// operation and cap, however many sprints it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    /// Agents in flight across the installation's operations.
    #[default]
    Agents,
    /// A daily budget (the installation's or the repository's).
    Budget,
}

/// One failing check of the repository's CI on a sprint's head, as the place
/// gathered it: scrubbed and bounded there. Its words come from code on the
/// agent's branch, so they are quoted to the next agent as data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "CiFailureForm")]
pub struct CiFailure {
    pub name: String,
    pub conclusion: String,
    /// What the check's output said.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub summary: String,
    /// Its annotations, `path:line: message` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<String>,
    /// The last lines of its job's log (a GitHub Actions job).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log_tail: String,
}

/// How a [`CiFailure`] is read: a log written before the details were kept
/// holds one line per check.
#[derive(Deserialize)]
#[serde(untagged)]
enum CiFailureForm {
    Line(String),
    Full {
        name: String,
        conclusion: String,
        #[serde(default)]
        summary: String,
        #[serde(default)]
        annotations: Vec<String>,
        #[serde(default)]
        log_tail: String,
    },
}

impl From<CiFailureForm> for CiFailure {
    fn from(f: CiFailureForm) -> CiFailure {
        match f {
            CiFailureForm::Line(summary) => CiFailure {
                summary,
                ..CiFailure::default()
            },
            CiFailureForm::Full {
                name,
                conclusion,
                summary,
                annotations,
                log_tail,
            } => CiFailure {
                name,
                conclusion,
                summary,
                annotations,
                log_tail,
            },
        }
    }
}

impl CiFailure {
    /// One line for a reason or a status table: the check's name and
    /// conclusion. What it said stays out: those words come from the
    /// agent's branch, and the next prompt quotes them apart (a line from
    /// an older log is that line).
    pub fn line(&self) -> String {
        if self.name.is_empty() {
            return self.summary.clone();
        }
        format!("`{}` {}", self.name, self.conclusion)
    }
}

/// A record of one finished dispatch, kept for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub dispatch: DispatchId,
    pub attempt: u32,
    pub tier: ModelTier,
    pub score: i32,
    pub kind: DispatchKind,
    pub dispatched_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub outcome: String,
    pub turns: Option<u32>,
    pub commits: Vec<String>,
    pub uncommitted: Vec<String>,
    /// Whether the dispatch is paid for: not when it never launched (held,
    /// then cancelled) or when the agent command itself could not run. A
    /// log written before this field counts every attempt, as it did then.
    #[serde(default = "charged_by_default")]
    pub charged: bool,
    /// What the agent's CLI reported the attempt used, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<super::usage::Usage>,
    /// Where the repository's CI failed on its head: the next attempt's
    /// prompt quotes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ci_failures: Vec<CiFailure>,
}

fn charged_by_default() -> bool {
    true
}

/// A sprint whose work was already done when the operation started: its progress
/// file marks it complete and none of its exit criteria fails.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlreadyDone {
    pub unit: String,
    pub sprint: SprintId,
    pub criteria: Vec<CriterionResult>,
    /// What showed it, for the decision log ("PROGRESS.md marks Sprint 1 complete").
    pub evidence: String,
}

/// What §14b records when a sprint is verified complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub started_at: DateTime<Utc>,
    pub completed_at: DateTime<Utc>,
    pub tier: ModelTier,
    pub score: i32,
    pub attempts: u32,
    pub turns: Option<u32>,
    pub commits: Vec<String>,
    pub criteria: Vec<CriterionResult>,
    /// Set when the sprint was found done at start and never dispatched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub already_done: Option<String>,
    /// Verified, but its merge into the integration branch is not yet
    /// confirmed: the unit's next sprint and its dependents wait, since they
    /// branch from the integration branch. (Absent in logs written before the
    /// rule, where a completion was taken as merged.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_merge: bool,
    /// What the agent handed back, kept for the workflow that reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl Completion {
    /// How many of the sprint's criteria nobody checked, when no machine
    /// checked any: the sprint was completed on the agent's word (a
    /// checklist of things only a person can judge, or no criteria at
    /// all). `None` when a criterion passed a check.
    pub fn on_agents_word(&self) -> Option<usize> {
        let checked = self
            .criteria
            .iter()
            .any(|c| c.outcome == CriterionOutcome::Passed);
        (!checked).then(|| {
            self.criteria
                .iter()
                .filter(|c| c.outcome == CriterionOutcome::Unverified)
                .count()
        })
    }
}

/// What a completed sprint's state is called wherever it is shown:
/// `COMPLETED`, or `COMPLETED on the agent's word (N criteria unverified)`.
pub fn completed_words(c: &Completion) -> String {
    c.on_agents_word()
        .map_or_else(|| "COMPLETED".into(), agents_word_words)
}

/// `COMPLETED on the agent's word (N criteria unverified)`.
pub fn agents_word_words(unverified: usize) -> String {
    match unverified {
        0 => "COMPLETED on the agent's word (no criteria to check)".into(),
        1 => "COMPLETED on the agent's word (1 criterion unverified)".into(),
        n => format!("COMPLETED on the agent's word ({n} criteria unverified)"),
    }
}

/// What one attempt came to, from the events its report was decided into:
/// the sprint's last move that is not a new dispatch. The sprint's status
/// afterwards says what happens next (a retry is DISPATCHED again), not
/// how the attempt ended; a check run titled by it said "DISPATCHED" of
/// an attempt that failed.
pub fn attempt_verdict(
    events: &[Event],
    unit: usize,
    sprint: usize,
) -> Option<super::SprintStatus> {
    use super::SprintStatus::{Dispatched, Pending, Running};
    events.iter().rev().find_map(|e| match e {
        Event::Sprint {
            unit: u,
            sprint: s,
            to,
            ..
        } if (*u, *s) == (unit, sprint) && !matches!(to, Dispatched | Running | Pending) => {
            Some(*to)
        }
        _ => None,
    })
}

/// The facts the engine records. `apply` folds them into state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    OperationStarted {
        operation: OperationId,
        name: String,
        seed: u64,
        plan: Box<Plan>,
        config: EngineConfig,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workflow: Option<Box<super::workflow::Workflow>>,
        at: DateTime<Utc>,
    },
    Renamed {
        name: String,
        at: DateTime<Utc>,
    },
    Overall {
        to: super::OverallStatus,
        reason: String,
        at: DateTime<Utc>,
    },
    Unit {
        unit: usize,
        to: super::UnitStatus,
        reason: String,
        at: DateTime<Utc>,
    },
    Sprint {
        unit: usize,
        sprint: usize,
        to: super::SprintStatus,
        at: DateTime<Utc>,
    },
    Dispatched {
        unit: usize,
        sprint: usize,
        dispatch: DispatchId,
        attempt: u32,
        tier: ModelTier,
        model_id: String,
        score: i32,
        cost: u64,
        kind: DispatchKind,
        at: DateTime<Utc>,
    },
    Activity {
        unit: usize,
        sprint: usize,
        at: DateTime<Utc>,
    },
    StallWarned {
        unit: usize,
        sprint: usize,
        at: DateTime<Utc>,
    },
    DispatchHeld {
        unit: usize,
        sprint: usize,
        hold: Hold,
        at: DateTime<Utc>,
    },
    /// Units appended to the plan (see [`Input::AddWork`]).
    WorkAdded {
        units: Vec<crate::plan::WorkUnit>,
        at: DateTime<Utc>,
    },
    DispatchReleased {
        unit: usize,
        sprint: usize,
        at: DateTime<Utc>,
    },
    CancelRequested {
        unit: usize,
        sprint: usize,
        reason: CancelReason,
        at: DateTime<Utc>,
    },
    AttemptClosed {
        unit: usize,
        sprint: usize,
        record: AttemptRecord,
    },
    FailureCounted {
        unit: usize,
        sprint: usize,
        reason: String,
        /// What the failing command criterion printed, when one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        check: Option<FailedCheck>,
        at: DateTime<Utc>,
    },
    FailuresReset {
        unit: usize,
        sprint: usize,
        at: DateTime<Utc>,
    },
    ContinuationCounted {
        unit: usize,
        sprint: usize,
        remaining: Vec<String>,
        /// What the failing command criterion printed, when one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        check: Option<FailedCheck>,
        at: DateTime<Utc>,
    },
    /// The model provider ended the run (a rate limit, an overload, a 5xx):
    /// no attempt is counted, and the sprint is dispatched again on the
    /// same model once `until` has passed.
    ProviderWait {
        unit: usize,
        sprint: usize,
        /// The provider's HTTP status; none when the connection failed
        /// (a stream cut off, no answer).
        status: Option<u16>,
        until: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    SprintCompleted {
        unit: usize,
        sprint: usize,
        completion: Completion,
    },
    AwaitingConfirmation {
        unit: usize,
        sprint: usize,
        at: DateTime<Utc>,
    },
    DeferredWaiting {
        unit: usize,
        sprint: usize,
        polls: u32,
        at: DateTime<Utc>,
    },
    Decision {
        entry: DecisionEntry,
    },
    UnitNote {
        unit: usize,
        note: String,
        at: DateTime<Utc>,
    },
    GateOpened {
        id: u32,
        layer: u32,
        units: Vec<String>,
        /// The gate this one runs again, after a failure that named no unit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_of: Option<u32>,
        at: DateTime<Utc>,
    },
    GateClosed {
        id: u32,
        passed: bool,
        at: DateTime<Utc>,
    },
    /// A COMPLETED sprint goes back to PENDING (its merged work was lost); its
    /// unit and the operation run again.
    Reopened {
        unit: usize,
        sprint: usize,
        at: DateTime<Utc>,
    },
    StopTicked {
        ticks: u32,
        at: DateTime<Utc>,
    },
    /// The operation's budgets, as a person set them since it started.
    BudgetSet {
        budget: Option<u64>,
        budget_usd: Option<crate::engine::usage::Usd>,
        at: DateTime<Utc>,
    },
    /// A completed sprint's merge into the integration branch is confirmed.
    Merged {
        unit: usize,
        sprint: usize,
        at: DateTime<Utc>,
    },
    /// The final head was verified again (see [`Input::HeadVerified`]).
    HeadVerified {
        verification: HeadVerification,
        at: DateTime<Utc>,
    },
    /// A verified sprint goes back to work on its own branch for what its
    /// reviewers asked (`reviews`, every one not yet answered): a fix round,
    /// counted against `review_rounds`, not against the attempts.
    ReviewRound {
        unit: usize,
        sprint: usize,
        reviews: Vec<ReviewFeedback>,
        at: DateTime<Utc>,
    },
    /// A review that arrived while a fix round ran: answered by the next.
    ReviewQueued {
        unit: usize,
        sprint: usize,
        review: ReviewFeedback,
        at: DateTime<Utc>,
    },
}

impl Event {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Event::OperationStarted { at, .. }
            | Event::Renamed { at, .. }
            | Event::Overall { at, .. }
            | Event::Unit { at, .. }
            | Event::Sprint { at, .. }
            | Event::Dispatched { at, .. }
            | Event::Activity { at, .. }
            | Event::StallWarned { at, .. }
            | Event::DispatchHeld { at, .. }
            | Event::WorkAdded { at, .. }
            | Event::DispatchReleased { at, .. }
            | Event::CancelRequested { at, .. }
            | Event::FailureCounted { at, .. }
            | Event::FailuresReset { at, .. }
            | Event::ContinuationCounted { at, .. }
            | Event::ProviderWait { at, .. }
            | Event::AwaitingConfirmation { at, .. }
            | Event::DeferredWaiting { at, .. }
            | Event::UnitNote { at, .. }
            | Event::GateOpened { at, .. }
            | Event::GateClosed { at, .. }
            | Event::Reopened { at, .. }
            | Event::StopTicked { at, .. }
            | Event::BudgetSet { at, .. }
            | Event::Merged { at, .. }
            | Event::HeadVerified { at, .. }
            | Event::ReviewRound { at, .. }
            | Event::ReviewQueued { at, .. } => *at,
            Event::AttemptClosed { record, .. } => record.finished_at,
            Event::SprintCompleted { completion, .. } => completion.completed_at,
            Event::Decision { entry } => entry.at,
        }
    }
}

/// One agent to launch: everything a runner needs, nothing it must decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchOrder {
    pub dispatch: DispatchId,
    pub unit: String,
    pub directory: Option<String>,
    pub sprint: SprintId,
    pub sprint_name: String,
    pub attempt: u32,
    pub tier: ModelTier,
    pub model_id: String,
    pub max_turns: u32,
    pub kind: DispatchKind,
    pub prompt: String,
    /// The repository file whose content is the agent's answer; `None`: the
    /// runner picks where `$SUPERVISE_RESULT_FILE` points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_file: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeKind {
    Blocked,
    DeferredWaiting,
    ManualCheck,
    BudgetReached,
    /// A dispatch waits for a cap above the operation (daily budget, agents
    /// in flight across operations).
    Held,
    Draining,
    Killed,
    Completed,
    /// Merged work vanished from the integration branch.
    WorkLost,
    /// Every unit completed, and exit criteria fail on the final head.
    VerificationFailed,
    /// A verified sprint's pull request waits for a person's review (told by
    /// the place that knows the repository asks for one).
    AwaitingReview,
}

/// What the adapters are asked to carry out, after the events are stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "effect", rename_all = "snake_case")]
pub enum Effect {
    Dispatch(DispatchOrder),
    Cancel {
        dispatch: DispatchId,
        force: bool,
    },
    /// Merge a verified sprint's branch into the operation's integration branch.
    Integrate {
        unit: String,
        sprint: SprintId,
        dispatch: DispatchId,
    },
    /// Run the build/test gate on the integration branch (§3.5).
    RunGate {
        gate: u32,
        layer: u32,
        units: Vec<String>,
    },
    /// Check a deferred sprint's condition again (§9).
    PollCondition {
        unit: String,
        sprint: SprintId,
    },
    Notify {
        kind: NoticeKind,
        unit: Option<String>,
        text: String,
    },
    /// Write the operation's name into the plan's frontmatter
    /// (`feature_name`, §2–3) on the integration branch, where the work goes
    /// and from where it reaches the default branch.
    NamePlan {
        name: String,
    },
    /// The dispatch was not paid for after all (its agent command could not
    /// run): a place that keeps its own ledger of spend (the service's daily
    /// caps) takes it out, so every figure of spend agrees with the state's.
    Refund {
        dispatch: DispatchId,
    },
    /// The status changed: refresh the status table wherever it is shown.
    PublishStatus,
    /// Every unit is COMPLETED: write the final verification (§14d).
    FinalReport,
}

/// An input the engine will not act on, with the reason for the person who sent it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("no operation has been started yet; run `start` first")]
    NotStarted,
    #[error("an operation is already under way for this plan (`{0}`); use `resume` or `status`")]
    AlreadyStarted(String),
    #[error("{0}")]
    NotAllowed(String),
    #[error("{0}")]
    UnknownUnit(String),
    /// `name-feature` before any start: the playful reproach of the ritual.
    #[error("{0}")]
    Ritual(String),
    /// Work that cannot be added as given (a name taken, a dependency unknown,
    /// a cycle, a unit without sprints).
    #[error("{0}")]
    BadWork(String),
    /// A report about a dispatch that is not (or no longer) out: harmless, ignored.
    #[error("dispatch {0} is not in flight")]
    StaleDispatch(String),
}
