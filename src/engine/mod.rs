//! The engine decides everything the supervisor does, and nothing else: it is pure,
//! `(state, input, now) → (events, effects)`, with no I/O, no clock and no hidden
//! randomness. The state machines (§1), dependency gates (§7), the verification
//! decision (§5), retries and model selection (§6a, §9), stop and killall (§10,
//! §11) and build gates (§3.5) live here.

pub mod blocked;
pub mod cascade;
mod decide;
pub mod done_before;
pub mod estimate;
pub mod events;
pub mod naming;
pub mod prompt;
pub mod provider;
pub mod replay;
pub mod select;
mod state;
pub mod trust;
pub mod usage;
pub mod workflow;

pub use decide::{
    decide, decide_mut, decide_shared, Decision, AGENT_COMMAND_FAILED, DONE_BEFORE_DISPATCH,
    NOT_SHOWN_DONE,
};
pub use events::*;
pub use state::*;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use usage::{Price, Usd};

/// What one attempt is expected to cost on each tier (haiku, sonnet, opus)
/// before a repository has a history: an agent's sprint of some tens of
/// turns at the large providers' list prices of 2026, read from many.
pub const DEFAULT_ATTEMPT_USD: [Usd; 3] = [
    Usd::from_micros(100_000),
    Usd::from_micros(600_000),
    Usd::from_micros(3_000_000),
];

/// Model ids per tier: what `SUPERVISE_MODEL` carries to the agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelIds {
    pub haiku: String,
    pub sonnet: String,
    pub opus: String,
}

impl Default for ModelIds {
    fn default() -> Self {
        ModelIds {
            haiku: "haiku".into(),
            sonnet: "sonnet".into(),
            opus: "opus".into(),
        }
    }
}

/// The knobs of an operation. Fixed when it starts (recorded in the first event),
/// so replaying a log never depends on today's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EngineConfig {
    /// Attempts per sprint before FATAL (§1).
    pub max_retries: u32,
    /// Agents in flight at once: never none.
    pub max_parallel: std::num::NonZeroU32,
    pub max_turns: u32,
    /// PARTIAL continuations before a PARTIAL counts as a failed attempt; keeps an
    /// agent that always does a little from looping for ever.
    pub max_continuations: u32,
    pub models: ModelIds,
    /// Relative cost per tier: haiku, sonnet, opus.
    pub costs: [u64; 3],
    /// Cap on the operation's total relative cost; reaching it drains like `stop`.
    pub budget: Option<u64>,
    /// Cap on the operation's dollars: what its attempts cost, and what
    /// those in flight and the next are expected to. Reaching it drains
    /// like `stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<Usd>,
    /// Dollars per million tokens by model id, for agents whose CLI reports
    /// tokens but no dollars.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
    /// What attempts are expected to cost and how many a sprint takes:
    /// learned from the repository's past operations when it started (else
    /// the defaults), so the estimate and the dollar budget's foresight are
    /// the same on replay.
    pub cost_model: estimate::CostModel,
    /// Whether a build gate runs at each phase boundary (§3.5).
    pub build_gate: bool,
    /// No output for this long: warn at half, cancel at the full time (§9).
    pub stall_timeout_secs: u64,
    /// An attempt running this long is stopped, however busy it looks: an
    /// agent that keeps printing but never finishes costs money all the same.
    pub max_agent_secs: u64,
    /// Ticks without any agent finishing before `stop` force-cancels (§10).
    pub stop_timeout_ticks: u32,
    /// Polls of a deferred condition before the person is asked (§9).
    pub deferred_report_polls: u32,
    /// Fix rounds a sprint gets for reviews asking for changes; one more
    /// and its unit is BLOCKED for the reviewer.
    pub review_rounds: u32,
    /// A verified sprint merges only once a person who may write approves
    /// it (`merge: after_review`). The engine does not wait on it, the
    /// place does; it is here so a status table can say what it waits for.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub merge_after_review: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_retries: 3,
            max_parallel: std::num::NonZeroU32::MIN.saturating_add(3),
            max_turns: 50,
            max_continuations: 3,
            models: ModelIds::default(),
            costs: [1, 10, 30],
            budget: None,
            budget_usd: None,
            prices: BTreeMap::new(),
            cost_model: estimate::CostModel::default(),
            build_gate: false,
            stall_timeout_secs: 30 * 60,
            max_agent_secs: 60 * 60,
            stop_timeout_ticks: 10,
            deferred_report_polls: 20,
            review_rounds: 3,
            merge_after_review: false,
        }
    }
}

impl EngineConfig {
    pub fn cost(&self, tier: ModelTier) -> u64 {
        self.costs[tier as usize]
    }

    /// What a tier's attempt is expected to cost before any is priced.
    pub fn attempt_usd(&self, tier: ModelTier) -> Usd {
        self.cost_model.attempt[tier as usize].mean
    }

    /// The price set for a tier's model, if any.
    pub fn price(&self, tier: ModelTier) -> Option<&Price> {
        self.prices.get(self.model_id(tier))
    }

    pub fn model_id(&self, tier: ModelTier) -> &str {
        match tier {
            ModelTier::Haiku => &self.models.haiku,
            ModelTier::Sonnet => &self.models.sonnet,
            ModelTier::Opus => &self.models.opus,
        }
    }
}
