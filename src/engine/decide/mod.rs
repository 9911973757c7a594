//! `decide`: one input in, the events it causes and the effects to carry out.
//! Each event is applied to a working copy as it is emitted, so every later rule
//! sees the state the log will hold.

use super::events::*;
use super::state::*;
use super::{cascade, prompt, provider, select, workflow};
use crate::text::nearest;
use chrono::{DateTime, Utc};
use std::sync::Arc;

mod agents;
mod commands;
mod gates;
mod review;
mod settle;
mod verdict;

/// What one input caused.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
}

/// One decision in the making: the state it changes as it goes (each event is
/// applied as it is emitted, so later rules see earlier ones), and the events
/// and effects it will hand back.
struct Decider<'a> {
    state: &'a mut Option<Arc<OperationState>>,
    events: Vec<Event>,
    effects: Vec<Effect>,
    now: DateTime<Utc>,
}

/// Pure form: the caller's state is untouched; apply the returned events to it.
pub fn decide(
    state: Option<&OperationState>,
    input: Input,
    now: DateTime<Utc>,
) -> Result<Decision, Refusal> {
    let mut work = state.cloned().map(Arc::new);
    decide_shared(&mut work, input, now)
}

/// In-place form for hot loops: the returned events are already applied to
/// `state` (by `apply`, as a replay would). Every refusal is decided before the
/// first event, so a refused input leaves `state` as it was.
pub fn decide_mut(
    state: &mut Option<OperationState>,
    input: Input,
    now: DateTime<Utc>,
) -> Result<Decision, Refusal> {
    let mut shared = state.take().map(Arc::new);
    let decided = decide_shared(&mut shared, input, now);
    // Held by no one else: given back without a copy.
    *state = shared.map(Arc::unwrap_or_clone);
    decided
}

/// [`decide_mut`] on a state others may hold too (the web view's copy, a
/// status being published): the state is copied at the decision's first
/// event if it is shared, and not at all if nothing changes — so a tick
/// that finds nothing to do copies nothing, and the operation's state is
/// kept once however many readers hold the version they last read.
pub fn decide_shared(
    state: &mut Option<Arc<OperationState>>,
    input: Input,
    now: DateTime<Utc>,
) -> Result<Decision, Refusal> {
    let mut c = Decider {
        state,
        events: Vec::new(),
        effects: Vec::new(),
        now,
    };
    match input {
        Input::Start {
            operation,
            plan,
            config,
            seed,
            workflow,
            already_done,
        } => c.start(operation, plan, config, seed, workflow, already_done)?,
        Input::NameFeature => c.name_feature()?,
        Input::Status => {
            c.require()?;
            c.effects.push(Effect::PublishStatus);
            return Ok(c.finish());
        }
        Input::Resume { unit } => c.resume(unit)?,
        Input::SetBudget { budget, budget_usd } => c.set_budget(budget, budget_usd)?,
        Input::Stop => c.stop()?,
        Input::Killall => c.killall()?,
        Input::AgentStarted { dispatch } | Input::AgentActivity { dispatch } => {
            c.heard(&dispatch)?
        }
        Input::AgentFinished { dispatch, report } => c.finished(&dispatch, report)?,
        Input::DispatchHeld {
            dispatch,
            reason,
            until,
            kind,
        } => c.held(
            &dispatch,
            Hold {
                reason,
                until,
                kind,
            },
        )?,
        Input::DispatchReleased { dispatch } => c.released(&dispatch)?,
        Input::DispatchFailed { dispatch, error } => c.dispatch_failed(&dispatch, &error)?,
        Input::Tick => {
            if c.state.is_none() {
                return Ok(Decision::default());
            }
            c.tick();
        }
        Input::GateResult {
            gate,
            passed,
            output,
            blame,
        } => c.gate_result(gate, passed, &output, blame)?,
        Input::ConditionPolled {
            unit,
            sprint,
            met,
            error,
            criteria,
        } => c.condition(&unit, &sprint, met, error, criteria)?,
        Input::MergeLost {
            unit,
            sprint,
            detail,
        } => c.merge_lost(&unit, &sprint, &detail)?,
        Input::HeadVerified { verification } => c.head_verified(verification)?,
        Input::Integrated { unit, sprint } => {
            let (u, s) = c.locate(&unit, &sprint)?;
            // Idempotent: a merge confirmed twice, or of a sprint since reopened,
            // changes nothing.
            if !c.sprint(u, s).awaiting_merge() {
                return Ok(c.finish());
            }
            c.emit(Event::Merged {
                unit: u,
                sprint: s,
                at: now,
            });
            c.settle();
        }
        Input::IntegrationFailed {
            unit,
            sprint,
            error,
        } => {
            let (u, s) = c.locate(&unit, &sprint)?;
            if !c.sprint(u, s).awaiting_merge() {
                return Ok(c.finish());
            }
            c.merge_blocked(u, s, &error);
            c.settle();
        }
        Input::ChangesRequested {
            unit,
            sprint,
            review,
        } => c.changes_requested(&unit, &sprint, review)?,
        Input::FinalChangesRequested { review } => c.final_changes_requested(review)?,
        Input::AddWork { units } => c.add_work(units)?,
        Input::ManualConfirmed { unit, sprint } => {
            let (u, s) = c.locate(&unit, &sprint)?;
            if !c.sprint(u, s).awaiting_confirmation {
                return Err(Refusal::NotAllowed(format!(
                    "{unit} Sprint {sprint} is not waiting for a confirmation"
                )));
            }
            c.confirm(u, s, Vec::new());
            c.settle();
        }
    }
    Ok(c.finish())
}

/// The outcome recorded for an attempt whose command could not be run (126/127).
pub const AGENT_COMMAND_FAILED: &str = "agent command could not run";

/// An attempt's outcome when its sprint's work was found on the head it was
/// to start from, and no agent ran: not paid for.
pub const DONE_BEFORE_DISPATCH: &str = "done before dispatch";

/// An attempt's outcome when a place launched no agent, saying the work was
/// there, but its checks did not show it: not paid for, and run again.
pub const NOT_SHOWN_DONE: &str = "no agent ran: the work said to be there was not shown";

/// An attempt's outcome when its work no longer merged into the integration
/// branch: a conflict round follows (see `Decider::conflict`).
pub const CONFLICT: &str = "conflict";

/// The conflict rounds a sprint gets before a person is asked to merge.
pub const CONFLICT_ROUNDS: usize = 2;

/// Outcomes of attempts that are not paid for: no agent ran.
pub const UNCHARGED: [&str; 3] = [AGENT_COMMAND_FAILED, DONE_BEFORE_DISPATCH, NOT_SHOWN_DONE];

impl Decider<'_> {
    pub(super) fn finish(mut self) -> Decision {
        if !self.events.is_empty() && !self.effects.contains(&Effect::PublishStatus) {
            self.effects.push(Effect::PublishStatus);
        }
        Decision {
            events: self.events,
            effects: self.effects,
        }
    }

    pub(super) fn emit(&mut self, e: Event) {
        if let Some(begun) = started(&e) {
            *self.state = Some(Arc::new(begun));
        } else if let Some(st) = self.state.as_mut() {
            apply_to(Arc::make_mut(st), &e);
        }
        self.events.push(e);
    }

    pub(super) fn require(&self) -> Result<&OperationState, Refusal> {
        self.state.as_deref().ok_or(Refusal::NotStarted)
    }

    pub(super) fn st(&self) -> &OperationState {
        self.state
            .as_deref()
            .expect("operation state exists after start")
    }

    pub(super) fn sprint(&self, u: usize, s: usize) -> &SprintRun {
        &self.st().units[u].sprints[s]
    }

    pub(super) fn names(&self, u: usize, s: usize) -> (String, crate::plan::SprintId) {
        let unit = &self.st().units[u];
        (unit.name.clone(), unit.sprints[s].id.clone())
    }

    pub(super) fn log(
        &mut self,
        u: Option<usize>,
        s: Option<usize>,
        decision: String,
        rationale: String,
    ) {
        let (unit, sprint) = match (u, s) {
            (Some(u), Some(s)) => {
                let (n, id) = self.names(u, s);
                (Some(n), Some(id))
            }
            (Some(u), None) => (Some(self.st().units[u].name.clone()), None),
            _ => (None, None),
        };
        self.emit(Event::Decision {
            entry: DecisionEntry {
                at: self.now,
                unit,
                sprint,
                decision,
                rationale,
            },
        });
    }

    pub(super) fn unit_to(&mut self, u: usize, to: UnitStatus, reason: &str) {
        let from = self.st().units[u].status;
        if from == to || !from.can_become(to) {
            return;
        }
        self.emit(Event::Unit {
            unit: u,
            to,
            reason: reason.to_string(),
            at: self.now,
        });
    }

    pub(super) fn sprint_to(&mut self, u: usize, s: usize, to: SprintStatus) {
        let from = self.sprint(u, s).status();
        if from == to || !from.can_become(to) {
            return;
        }
        self.emit(Event::Sprint {
            unit: u,
            sprint: s,
            to,
            at: self.now,
        });
    }

    pub(super) fn overall(&mut self, to: OverallStatus, reason: &str) {
        if self.st().status != to {
            self.emit(Event::Overall {
                to,
                reason: reason.to_string(),
                at: self.now,
            });
        }
    }

    pub(super) fn find(&self, d: &DispatchId) -> Result<(usize, usize), Refusal> {
        self.require()?
            .find_dispatch(d)
            .ok_or_else(|| Refusal::StaleDispatch(d.0.clone()))
    }

    pub(super) fn locate(
        &self,
        unit: &str,
        sprint: &crate::plan::SprintId,
    ) -> Result<(usize, usize), Refusal> {
        let st = self.require()?;
        let u = self.unit_named(unit)?;
        let s = st.units[u]
            .sprints
            .iter()
            .position(|x| &x.id == sprint)
            .ok_or_else(|| {
                Refusal::NotAllowed(format!("work unit {unit} has no sprint {sprint}"))
            })?;
        Ok((u, s))
    }

    pub(super) fn unit_named(&self, name: &str) -> Result<usize, Refusal> {
        let st = self.require()?;
        st.unit_index(name).ok_or_else(|| {
            let hint = nearest(name, st.units.iter().map(|u| u.name.as_str()))
                .map(|n| format!(" Did you mean `{n}`?"))
                .unwrap_or_default();
            Refusal::UnknownUnit(format!(
                "there is no work unit {} in this plan.{hint}",
                crate::text::code_span(name)
            ))
        })
    }
}
