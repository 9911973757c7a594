//! `decide`: one input in, the events it causes and the effects to carry out.
//! Each event is applied to a working copy as it is emitted, so every later rule
//! sees the state the log will hold.

use super::events::*;
use super::state::*;
use super::{naming, prompt, select, verify};
use crate::text::nearest;
use chrono::{DateTime, Utc};

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
    state: &'a mut Option<OperationState>,
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
    let mut work = state.cloned();
    decide_mut(&mut work, input, now)
}

/// In-place form for hot loops: the returned events are already applied to
/// `state` (by `apply`, as a replay would). Every refusal is decided before the
/// first event, so a refused input leaves `state` as it was.
pub fn decide_mut(
    state: &mut Option<OperationState>,
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
            already_done,
        } => {
            if let Some(st) = &c.state {
                return Err(Refusal::AlreadyStarted(st.name.clone()));
            }
            let name = plan
                .feature_name
                .clone()
                .unwrap_or_else(|| naming::operation_name(seed));
            let units = plan.work_units.len();
            let sprints = plan.total_sprints();
            c.emit(Event::OperationStarted {
                operation,
                name: name.clone(),
                seed,
                plan,
                config,
                at: now,
            });
            c.log(
                None,
                None,
                format!("Operation named: {name}"),
                format!("{units} work unit(s), {sprints} sprint(s)"),
            );
            c.already_done(already_done);
            c.settle();
        }
        Input::NameFeature => {
            let st = c
                .state
                .as_ref()
                .ok_or_else(|| Refusal::Ritual(naming::REPROACH.to_string()))?;
            let name = naming::operation_name(st.seed.wrapping_add(st.renames as u64 + 1));
            c.emit(Event::Renamed {
                name: name.clone(),
                at: now,
            });
            c.log(
                None,
                None,
                format!("Operation renamed: {name}"),
                "name-feature after start".into(),
            );
        }
        Input::Status => {
            c.require()?;
            c.effects.push(Effect::PublishStatus);
            return Ok(c.finish());
        }
        Input::Resume { unit } => c.resume(unit)?,
        Input::Stop => c.stop()?,
        Input::Killall => c.killall()?,
        Input::AgentStarted { dispatch } | Input::AgentActivity { dispatch } => {
            let (u, s) = c.find(&dispatch)?;
            if c.sprint(u, s).status() == SprintStatus::Dispatched {
                c.sprint_to(u, s, SprintStatus::Running);
            }
            let last = c.sprint(u, s).active.as_ref().map(|a| a.last_activity);
            // Activity is recorded at most once a second: the log stays small.
            if last.is_none_or(|l| (now - l).num_milliseconds() >= 1000)
                || c.sprint(u, s)
                    .active
                    .as_ref()
                    .is_some_and(|a| a.stall_warned)
            {
                c.emit(Event::Activity {
                    unit: u,
                    sprint: s,
                    at: now,
                });
            }
        }
        Input::AgentFinished { dispatch, report } => c.finished(&dispatch, report)?,
        Input::DispatchFailed { dispatch, error } => {
            let (u, s) = c.find(&dispatch)?;
            c.close_attempt(u, s, "dispatch failed", &AgentReport::default());
            if c.sprint(u, s).status() == SprintStatus::Dispatched {
                c.sprint_to(u, s, SprintStatus::Running);
            }
            c.fail(
                u,
                s,
                format!("the runner could not launch the agent: {error}"),
            );
            c.settle();
        }
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
        } => c.gate_result(gate, passed, &output)?,
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
        } => {
            let (u, s) = c.locate(&unit, &sprint)?;
            // Idempotent: a sprint already reopened (or never completed) stays.
            if c.sprint(u, s).status() != SprintStatus::Completed {
                return Ok(c.finish());
            }
            c.emit(Event::Reopened {
                unit: u,
                sprint: s,
                at: now,
            });
            c.log(
                Some(u),
                Some(s),
                format!("Sprint {sprint} merge lost; back to PENDING"),
                detail.clone(),
            );
            c.effects.push(Effect::Notify {
                kind: NoticeKind::WorkLost,
                unit: Some(unit.clone()),
                text: format!(
                    "{unit} Sprint {sprint} was merged, but its work is no longer in the integration branch ({detail}). Something moved the branch back; the sprint runs again."
                ),
            });
            c.settle();
        }
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

impl Decider<'_> {
    fn finish(mut self) -> Decision {
        if !self.events.is_empty() && !self.effects.contains(&Effect::PublishStatus) {
            self.effects.push(Effect::PublishStatus);
        }
        Decision {
            events: self.events,
            effects: self.effects,
        }
    }

    fn emit(&mut self, e: Event) {
        apply(self.state, &e);
        self.events.push(e);
    }

    fn require(&self) -> Result<&OperationState, Refusal> {
        self.state.as_ref().ok_or(Refusal::NotStarted)
    }

    fn st(&self) -> &OperationState {
        self.state
            .as_ref()
            .expect("operation state exists after start")
    }

    fn sprint(&self, u: usize, s: usize) -> &SprintRun {
        &self.st().units[u].sprints[s]
    }

    fn names(&self, u: usize, s: usize) -> (String, crate::plan::SprintId) {
        let unit = &self.st().units[u];
        (unit.name.clone(), unit.sprints[s].id.clone())
    }

    fn log(&mut self, u: Option<usize>, s: Option<usize>, decision: String, rationale: String) {
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

    fn unit_to(&mut self, u: usize, to: UnitStatus, reason: &str) {
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

    fn sprint_to(&mut self, u: usize, s: usize, to: SprintStatus) {
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

    fn overall(&mut self, to: OverallStatus, reason: &str) {
        if self.st().status != to {
            self.emit(Event::Overall {
                to,
                reason: reason.to_string(),
                at: self.now,
            });
        }
    }

    fn find(&self, d: &DispatchId) -> Result<(usize, usize), Refusal> {
        self.require()?
            .find_dispatch(d)
            .ok_or_else(|| Refusal::StaleDispatch(d.0.clone()))
    }

    fn locate(
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

    fn unit_named(&self, name: &str) -> Result<usize, Refusal> {
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

    // ---- commands -------------------------------------------------------------

    fn resume(&mut self, unit: Option<String>) -> Result<(), Refusal> {
        let st = self.require()?;
        if st.status == OverallStatus::Completed {
            return Err(Refusal::NotAllowed(
                "the operation is complete; there is nothing to resume".into(),
            ));
        }
        let targets: Vec<usize> = match &unit {
            Some(n) => vec![self.unit_named(n)?],
            None => (0..st.units.len()).collect(),
        };
        self.overall(OverallStatus::Running, "resumed");
        for u in targets {
            let status = self.st().units[u].status;
            let cur = self.st().units[u].current();
            match status {
                UnitStatus::Stopped | UnitStatus::Stopping => {
                    self.unit_to(u, UnitStatus::Running, "resume")
                }
                UnitStatus::Killed => {
                    self.unit_to(u, UnitStatus::Running, "resume after kill");
                    if let Some(s) = cur {
                        // §10: re-dispatch the interrupted sprint, attempts preserved.
                        self.sprint_to(u, s, SprintStatus::Pending);
                    }
                }
                UnitStatus::Blocked => {
                    self.unit_to(u, UnitStatus::Running, "resume after BLOCKED");
                    // (A unit blocked on a merge has no FATAL sprint to reset.)
                    if let Some(s) =
                        cur.filter(|&s| self.sprint(u, s).status() == SprintStatus::Fatal)
                    {
                        let failures = self.sprint(u, s).failures;
                        self.sprint_to(u, s, SprintStatus::Pending);
                        self.emit(Event::FailuresReset {
                            unit: u,
                            sprint: s,
                            at: self.now,
                        });
                        self.log(Some(u), Some(s), "Resumed after FATAL: sprint reset to PENDING".into(), format!("{failures} earlier failed attempt(s); the attempt counter starts again"));
                    }
                }
                _ => {}
            }
            // A merge a person was asked to make: try it again (it is idempotent,
            // and a pull request merged by hand is found merged).
            if status == UnitStatus::Blocked {
                self.integrate_again(u);
            }
            // §5e: a manual sprint is confirmed by the person's resume.
            if let Some(s) = self.st().units[u].current() {
                if self.sprint(u, s).awaiting_confirmation {
                    self.confirm(u, s, Vec::new());
                }
            }
        }
        self.settle();
        Ok(())
    }

    fn stop(&mut self) -> Result<(), Refusal> {
        let st = self.require()?;
        if !matches!(st.status, OverallStatus::Running | OverallStatus::Blocked) {
            return Err(Refusal::NotAllowed(format!(
                "the operation is {}; there is nothing to stop",
                st.status
            )));
        }
        for u in 0..st.units.len() {
            if self.st().units[u].status == UnitStatus::Running {
                self.unit_to(u, UnitStatus::Stopping, "stop");
            }
        }
        let n = self.st().active_count();
        self.overall(OverallStatus::Stopping, "stop requested");
        self.log(
            None,
            None,
            "Graceful shutdown".into(),
            format!("no new dispatches; waiting for {n} active agent(s)"),
        );
        self.effects.push(Effect::Notify {
            kind: NoticeKind::Draining,
            unit: None,
            text: format!(
                "Supervisor entering graceful shutdown. Waiting for {n} active agents to finish."
            ),
        });
        self.settle();
        Ok(())
    }

    fn killall(&mut self) -> Result<(), Refusal> {
        let st = self.require()?;
        if matches!(st.status, OverallStatus::Completed) {
            return Err(Refusal::NotAllowed(
                "the operation is complete; there is nothing to kill".into(),
            ));
        }
        let n = self.cancel_all(CancelReason::Killall);
        self.overall(OverallStatus::Killed, "user invoked killall");
        self.log(
            None,
            None,
            "Kill all".into(),
            format!("{n} agent(s) terminated"),
        );
        self.effects.push(Effect::Notify {
            kind: NoticeKind::Killed,
            unit: None,
            text: format!("Kill all complete. Agents terminated: {n}"),
        });
        Ok(())
    }

    /// Cancels every agent in flight; their units become KILLED and their sprints
    /// BACKOFF with the attempt counter kept (§10 phase 3, §11).
    fn cancel_all(&mut self, reason: CancelReason) -> usize {
        let mut n = 0;
        for u in 0..self.st().units.len() {
            for s in 0..self.st().units[u].sprints.len() {
                let Some(a) = self.sprint(u, s).active.clone() else {
                    continue;
                };
                if a.cancel.is_none() || a.cancel == Some(CancelReason::Stalled) {
                    n += 1;
                    self.emit(Event::CancelRequested {
                        unit: u,
                        sprint: s,
                        reason,
                        at: self.now,
                    });
                    self.effects.push(Effect::Cancel {
                        dispatch: a.id.clone(),
                        force: true,
                    });
                }
                if self.sprint(u, s).status().in_flight() {
                    self.sprint_to(u, s, SprintStatus::Backoff);
                }
                if reason == CancelReason::StopTimeout {
                    self.log(
                        Some(u),
                        Some(s),
                        format!(
                            "Sprint {} force-terminated during graceful shutdown",
                            self.sprint(u, s).id
                        ),
                        "no agent finished within the stop timeout".into(),
                    );
                }
            }
            if matches!(
                self.st().units[u].status,
                UnitStatus::Running | UnitStatus::Stopping
            ) {
                self.unit_to(u, UnitStatus::Killed, "agents terminated");
            }
        }
        n
    }

    // ---- agents ----------------------------------------------------------------

    fn close_attempt(&mut self, u: usize, s: usize, outcome: &str, report: &AgentReport) {
        let Some(a) = self.sprint(u, s).active.clone() else {
            return;
        };
        let record = AttemptRecord {
            dispatch: a.id,
            attempt: a.attempt,
            tier: a.tier,
            score: a.score,
            kind: a.kind,
            dispatched_at: a.dispatched_at,
            finished_at: self.now,
            outcome: outcome.to_string(),
            turns: report.turns_used,
            commits: report.evidence.commits.clone(),
            uncommitted: report.evidence.uncommitted.clone(),
        };
        self.emit(Event::AttemptClosed {
            unit: u,
            sprint: s,
            record,
        });
    }

    fn finished(&mut self, dispatch: &DispatchId, report: AgentReport) -> Result<(), Refusal> {
        let (u, s) = self.find(dispatch)?;
        let active = self
            .sprint(u, s)
            .active
            .clone()
            .expect("found by its active dispatch");
        match active.cancel {
            Some(CancelReason::Killall | CancelReason::StopTimeout) => {
                self.close_attempt(u, s, "terminated", &report);
                if !report.evidence.uncommitted.is_empty() {
                    let id = self.sprint(u, s).id.clone();
                    let note = format!(
                        "has uncommitted work from killed Sprint {id}: {}",
                        report.evidence.uncommitted.join(", ")
                    );
                    self.emit(Event::UnitNote {
                        unit: u,
                        note,
                        at: self.now,
                    });
                }
                self.settle();
                return Ok(());
            }
            Some(CancelReason::Stalled) => {
                self.sprint_to(u, s, SprintStatus::Running);
                self.close_attempt(u, s, "cancelled: unresponsive", &report);
                let secs = self.st().config.stall_timeout_secs;
                self.fail(
                    u,
                    s,
                    format!("the agent produced no output for {secs} s and was cancelled"),
                );
                self.settle();
                return Ok(());
            }
            None => {}
        }
        self.sprint_to(u, s, SprintStatus::Running);
        // 126/127: the shell could not run the agent command at all (not found,
        // not executable). That is the command's fault, not the agent's: no
        // attempt is charged, no stronger model is paid for, and the operation
        // stops with the message until the command is fixed.
        if matches!(report.exit_code, Some(126 | 127)) && active.attempt == 1 {
            self.close_attempt(u, s, AGENT_COMMAND_FAILED, &report);
            self.sprint_to(u, s, SprintStatus::Backoff);
            let tail = report.output_tail.trim();
            let tail = tail.lines().last().unwrap_or("");
            self.log(
                Some(u),
                Some(s),
                "The agent command could not run; stopping".into(),
                format!("exit status {}: {tail}", report.exit_code.unwrap_or(0)),
            );
            self.effects.push(Effect::Notify {
                kind: NoticeKind::Blocked,
                unit: None,
                text: format!(
                    "The agent command could not run (exit status {}: {tail}). No attempt was counted. Fix the command (--agent, or `agent:` in .github/supervise.yml), then `supervise resume`.",
                    report.exit_code.unwrap_or(0)
                ),
            });
            let _ = self.stop();
            self.settle();
            return Ok(());
        }
        let plan_sprint = &self.st().plan.work_units[u].sprints[s];
        let outcome = verify::assess(plan_sprint, &report, self.st().config.max_turns);
        let label = match &outcome {
            verify::Outcome::Completed => "completed",
            verify::Outcome::Partial(_) => "partial",
            verify::Outcome::Failed(_) => "failed",
            verify::Outcome::Waiting => "waiting",
            verify::Outcome::AwaitConfirmation => "awaiting confirmation",
        };
        self.close_attempt(u, s, label, &report);
        let id = self.sprint(u, s).id.clone();
        match outcome {
            verify::Outcome::Completed => self.complete(u, s, &active, &report),
            verify::Outcome::Partial(remaining) => {
                let max = self.st().config.max_continuations;
                if self.sprint(u, s).continuations >= max {
                    self.fail(
                        u,
                        s,
                        format!(
                            "still partial after {max} continuations; remaining: {}",
                            remaining.join("; ")
                        ),
                    );
                } else {
                    self.sprint_to(u, s, SprintStatus::Partial);
                    self.log(
                        Some(u),
                        Some(s),
                        format!("Sprint {id} PARTIAL"),
                        format!("remaining: {}", remaining.join("; ")),
                    );
                    self.emit(Event::ContinuationCounted {
                        unit: u,
                        sprint: s,
                        remaining,
                        at: self.now,
                    });
                }
            }
            verify::Outcome::Failed(reason) => self.fail(u, s, reason),
            verify::Outcome::Waiting => {
                self.emit(Event::DeferredWaiting {
                    unit: u,
                    sprint: s,
                    polls: 0,
                    at: self.now,
                });
                self.log(
                    Some(u),
                    Some(s),
                    format!("Sprint {id} waiting on its condition"),
                    "deferred sprint: polling does not count as an attempt".into(),
                );
            }
            verify::Outcome::AwaitConfirmation => {
                self.sprint_to(u, s, SprintStatus::Partial);
                self.emit(Event::AwaitingConfirmation {
                    unit: u,
                    sprint: s,
                    at: self.now,
                });
                let unit = self.st().units[u].name.clone();
                self.effects.push(Effect::Notify {
                    kind: NoticeKind::ManualCheck,
                    unit: Some(unit.clone()),
                    text: format!("{unit} Sprint {id} is a manual sprint: review the agent's findings, then confirm with `resume`."),
                });
            }
        }
        self.settle();
        Ok(())
    }

    fn complete(&mut self, u: usize, s: usize, active: &ActiveDispatch, report: &AgentReport) {
        let started_at = self
            .sprint(u, s)
            .first_dispatched_at()
            .unwrap_or(active.dispatched_at);
        let completion = Completion {
            started_at,
            completed_at: self.now,
            tier: active.tier,
            score: active.score,
            attempts: active.attempt,
            turns: report.turns_used,
            commits: report.evidence.commits.clone(),
            criteria: report.evidence.criteria.clone(),
            already_done: None,
            awaiting_merge: true,
        };
        self.emit(Event::SprintCompleted {
            unit: u,
            sprint: s,
            completion,
        });
        let (unit, sprint) = self.names(u, s);
        self.log(
            Some(u),
            Some(s),
            format!("Sprint {sprint} COMPLETED"),
            "verification cascade confirmed the exit criteria".into(),
        );
        self.effects.push(Effect::Integrate {
            unit,
            sprint,
            dispatch: active.id.clone(),
        });
    }

    /// A verified sprint that cannot be merged without a person: its unit is
    /// BLOCKED (nothing after it may branch from an integration branch that
    /// lacks it) and the person is told how to go on.
    fn merge_blocked(&mut self, u: usize, s: usize, error: &str) {
        let (unit, id) = self.names(u, s);
        if self.st().units[u].status.can_become(UnitStatus::Blocked) {
            self.unit_to(u, UnitStatus::Blocked, "merge needs a person");
        }
        self.log(
            Some(u),
            Some(s),
            format!("Sprint {id} verified but not merged; {unit} BLOCKED"),
            error.to_string(),
        );
        self.effects.push(Effect::Notify {
            kind: NoticeKind::Blocked,
            unit: Some(unit.clone()),
            text: format!(
                "BLOCKED: {unit} Sprint {id} passed verification but could not be merged.\nReason: {error}\nAfter fixing it: supervise resume {unit}\n(resume merges the sprint again, then the work unit goes on)"
            ),
        });
    }

    /// Asks again for the merge of every verified sprint of the unit whose merge
    /// is not confirmed.
    fn integrate_again(&mut self, u: usize) {
        for s in 0..self.st().units[u].sprints.len() {
            let sp = self.sprint(u, s);
            if !sp.awaiting_merge() {
                continue;
            }
            let Some(dispatch) = sp.history.last().map(|h| h.dispatch.clone()) else {
                continue;
            };
            let (unit, sprint) = self.names(u, s);
            self.effects.push(Effect::Integrate {
                unit,
                sprint,
                dispatch,
            });
        }
    }

    /// §3 steps 4–5: sprints done before the operation started are recorded as
    /// COMPLETED with their evidence instead of being paid for again. Only a
    /// unit's leading sprints count: a later sprint found done while an earlier
    /// one is not is dispatched as planned.
    fn already_done(&mut self, found: Vec<AlreadyDone>) {
        for u in 0..self.st().units.len() {
            for s in 0..self.st().units[u].sprints.len() {
                let (name, id) = self.names(u, s);
                let Some(f) = found.iter().find(|f| f.unit == name && f.sprint == id) else {
                    break;
                };
                let completion = Completion {
                    started_at: self.now,
                    completed_at: self.now,
                    tier: ModelTier::Haiku,
                    score: 0,
                    attempts: 0,
                    turns: None,
                    commits: Vec::new(),
                    criteria: f.criteria.clone(),
                    already_done: Some(f.evidence.clone()),
                    awaiting_merge: false,
                };
                self.emit(Event::SprintCompleted {
                    unit: u,
                    sprint: s,
                    completion,
                });
                self.log(
                    Some(u),
                    Some(s),
                    format!("Sprint {id} already done: COMPLETED without a dispatch"),
                    f.evidence.clone(),
                );
            }
        }
    }

    /// Completes a sprint whose last attempt already closed: a manual sprint a
    /// person confirmed (no criteria checked), or a deferred one whose condition
    /// was met (`criteria` is what the poll checked).
    fn confirm(&mut self, u: usize, s: usize, criteria: Vec<CriterionResult>) {
        let Some(last) = self.sprint(u, s).history.last().cloned() else {
            return;
        };
        let active = ActiveDispatch {
            id: last.dispatch.clone(),
            attempt: last.attempt,
            tier: last.tier,
            model_id: String::new(),
            score: last.score,
            kind: last.kind,
            dispatched_at: last.dispatched_at,
            last_activity: last.finished_at,
            stall_warned: false,
            cancel: None,
        };
        let report = AgentReport {
            turns_used: last.turns,
            evidence: Evidence {
                commits: last.commits,
                criteria,
                ..Default::default()
            },
            ..Default::default()
        };
        self.complete(u, s, &active, &report);
    }

    /// A failed attempt: BACKOFF, or FATAL and BLOCKED once retries are spent (§9).
    fn fail(&mut self, u: usize, s: usize, reason: String) {
        self.emit(Event::FailureCounted {
            unit: u,
            sprint: s,
            reason: reason.clone(),
            at: self.now,
        });
        self.sprint_to(u, s, SprintStatus::Backoff);
        let failures = self.sprint(u, s).failures;
        let max = self.st().config.max_retries;
        let (unit, id) = self.names(u, s);
        if failures >= max {
            self.sprint_to(u, s, SprintStatus::Fatal);
            self.unit_to(u, UnitStatus::Blocked, "sprint FATAL");
            self.log(
                Some(u),
                Some(s),
                format!("Sprint {id} FATAL; {unit} BLOCKED"),
                format!("failed {failures} of {max} attempts; last failure: {reason}"),
            );
            self.effects.push(Effect::Notify {
                kind: NoticeKind::Blocked,
                unit: Some(unit.clone()),
                text: format!(
                    "BLOCKED: {unit} Sprint {id} failed after {max} attempts.\nLast failure: {reason}\nTo retry: supervise resume {unit}\n(resume resets the sprint to PENDING and the work unit to RUNNING)"
                ),
            });
        } else {
            self.log(
                Some(u),
                Some(s),
                format!("Sprint {id} BACKOFF (attempt {failures}/{max} failed)"),
                reason,
            );
        }
    }

    fn condition(
        &mut self,
        unit: &str,
        sprint: &crate::plan::SprintId,
        met: bool,
        error: Option<String>,
        criteria: Vec<CriterionResult>,
    ) -> Result<(), Refusal> {
        let (u, s) = self.locate(unit, sprint)?;
        if !self.sprint(u, s).deferred_waiting {
            return Err(Refusal::NotAllowed(format!(
                "{unit} Sprint {sprint} is not waiting on a condition"
            )));
        }
        if met {
            self.confirm(u, s, criteria);
        } else if let Some(e) = error {
            self.fail(
                u,
                s,
                format!("the awaited condition reported an error: {e}"),
            );
        } else {
            let polls = self.sprint(u, s).deferred_polls + 1;
            self.emit(Event::DeferredWaiting {
                unit: u,
                sprint: s,
                polls,
                at: self.now,
            });
            if polls == self.st().config.deferred_report_polls {
                let text = format!("{unit} Sprint {sprint} is waiting on its condition. Still not met after {polls} checks. Continue waiting or intervene?");
                self.log(
                    Some(u),
                    Some(s),
                    "Deferred sprint still waiting".into(),
                    text.clone(),
                );
                self.effects.push(Effect::Notify {
                    kind: NoticeKind::DeferredWaiting,
                    unit: Some(unit.to_string()),
                    text,
                });
            }
        }
        self.settle();
        Ok(())
    }

    fn tick(&mut self) {
        let stall = self.st().config.stall_timeout_secs as i64;
        for u in 0..self.st().units.len() {
            for s in 0..self.st().units[u].sprints.len() {
                let sp = self.sprint(u, s);
                if let Some(a) = sp.active.clone() {
                    if a.cancel.is_some() {
                        continue;
                    }
                    let idle = (self.now - a.last_activity).num_seconds();
                    let id = sp.id.clone();
                    if idle >= stall {
                        self.emit(Event::CancelRequested {
                            unit: u,
                            sprint: s,
                            reason: CancelReason::Stalled,
                            at: self.now,
                        });
                        self.effects.push(Effect::Cancel {
                            dispatch: a.id,
                            force: false,
                        });
                        self.log(
                            Some(u),
                            Some(s),
                            format!("Sprint {id} agent unresponsive: cancelling"),
                            format!("no output for {idle} s"),
                        );
                    } else if idle >= stall / 2 && !a.stall_warned {
                        self.emit(Event::StallWarned {
                            unit: u,
                            sprint: s,
                            at: self.now,
                        });
                        self.log(
                            Some(u),
                            Some(s),
                            format!("Sprint {id} agent may be unresponsive"),
                            format!("no output for {idle} s; still waiting"),
                        );
                    }
                } else if sp.deferred_waiting && self.st().units[u].status == UnitStatus::Running {
                    let (unit, sprint) = self.names(u, s);
                    self.effects.push(Effect::PollCondition { unit, sprint });
                }
            }
        }
        if self.st().status == OverallStatus::Stopping && self.st().active_count() > 0 {
            let ticks = self.st().stop_ticks + 1;
            self.emit(Event::StopTicked {
                ticks,
                at: self.now,
            });
            if ticks >= self.st().config.stop_timeout_ticks {
                let n = self.cancel_all(CancelReason::StopTimeout);
                self.overall(
                    OverallStatus::Killed,
                    "stop timed out; remaining agents force-terminated",
                );
                self.effects.push(Effect::Notify {
                    kind: NoticeKind::Killed,
                    unit: None,
                    text: format!("Graceful shutdown timed out; {n} agent(s) force-terminated."),
                });
            }
        }
        self.settle();
    }

    fn gate_result(&mut self, gate: u32, passed: bool, output: &str) -> Result<(), Refusal> {
        let g = self
            .require()?
            .gates
            .iter()
            .find(|g| g.id == gate && g.passed.is_none())
            .cloned();
        let Some(g) = g else {
            return Err(Refusal::NotAllowed(format!(
                "build gate {gate} is not open"
            )));
        };
        self.emit(Event::GateClosed {
            id: gate,
            passed,
            at: self.now,
        });
        if passed {
            self.log(
                None,
                None,
                format!("Build gate {gate} passed (layer {})", g.layer),
                format!("units: {}", g.units.join(", ")),
            );
        } else {
            let tail: String = output
                .lines()
                .rev()
                .take(20)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            let named = self.units_named_in(&g.units, output);
            if named.is_empty() && g.retry_of.is_none() {
                // Nothing in the output points at a unit: the failure may be
                // flaky or environmental, so run the gate once more before
                // charging anyone an attempt.
                let id = self.st().gates.len() as u32 + 1;
                self.log(
                    None,
                    None,
                    format!(
                        "Build gate {gate} failed (layer {}); running it again as gate {id}",
                        g.layer
                    ),
                    "the output names no unit's files or package; no attempt is charged yet".into(),
                );
                self.emit(Event::GateOpened {
                    id,
                    layer: g.layer,
                    units: g.units.clone(),
                    retry_of: Some(gate),
                    at: self.now,
                });
                self.effects.push(Effect::RunGate {
                    gate: id,
                    layer: g.layer,
                    units: g.units.clone(),
                });
                self.settle();
                return Ok(());
            }
            let charged = if named.is_empty() {
                g.units.clone()
            } else {
                named
            };
            self.log(
                None,
                None,
                format!("Build gate {gate} failed (layer {})", g.layer),
                format!(
                    "failures attributed to the last sprint of: {}{}",
                    charged.join(", "),
                    if charged.len() < g.units.len() {
                        " (named in the build output)"
                    } else {
                        ""
                    }
                ),
            );
            for name in &charged {
                let Some(u) = self.st().unit_index(name) else {
                    continue;
                };
                let Some(s) = self.st().units[u].sprints.len().checked_sub(1) else {
                    continue;
                };
                if self.st().units[u].status == UnitStatus::Running {
                    self.fail(
                        u,
                        s,
                        format!("the coordinated build failed after this phase:\n{tail}"),
                    );
                }
            }
        }
        self.settle();
        Ok(())
    }

    /// The gate's units that a build output points at: a path under the unit's
    /// directory, or the unit's name as a word (a package or crate name).
    fn units_named_in(&self, units: &[String], output: &str) -> Vec<String> {
        let lower = output.to_lowercase();
        units
            .iter()
            .filter(|name| {
                let dir = self
                    .st()
                    .plan
                    .unit(name)
                    .and_then(|u| u.directory.clone())
                    .filter(|d| !d.is_empty() && d != ".");
                dir.is_some_and(|d| lower.contains(&format!("{}/", d.to_lowercase())))
                    || crate::text::contains_word(&lower, &name.to_lowercase())
            })
            .cloned()
            .collect()
    }

    // ---- settle: what the new state implies --------------------------------------

    fn settle(&mut self) {
        for _ in 0..8 {
            let before = self.events.len();
            self.activate_units();
            self.finish_units();
            if self.st().status == OverallStatus::Running {
                self.dispatch_ready();
            }
            self.conclude();
            if self.events.len() == before {
                break;
            }
        }
    }

    /// §7: a NOT_STARTED unit starts once every dependency is COMPLETED.
    fn activate_units(&mut self) {
        if self.st().status != OverallStatus::Running {
            return;
        }
        for u in 0..self.st().units.len() {
            if self.st().units[u].status != UnitStatus::NotStarted {
                continue;
            }
            if self.st().ready_to_start(u) {
                let deps = self.st().plan.work_units[u].depends_on.clone();
                self.unit_to(u, UnitStatus::Running, "dependencies complete");
                let why = if deps.is_empty() {
                    "no dependencies".to_string()
                } else {
                    format!("dependencies COMPLETED: {}", deps.join(", "))
                };
                self.log(Some(u), None, "Work unit started".into(), why);
            }
        }
    }

    /// Stopping units with nothing in flight stop; finished units complete, behind
    /// the build gate of their layer when one is configured (§3.5).
    fn finish_units(&mut self) {
        let gate = self.st().config.build_gate;
        for u in 0..self.st().units.len() {
            let unit = &self.st().units[u];
            if unit.status == UnitStatus::Stopping && unit.active().is_none() {
                self.unit_to(u, UnitStatus::Stopped, "drained");
                continue;
            }
            if unit.status != UnitStatus::Running || !unit.all_sprints_done() {
                continue;
            }
            let covered = self
                .st()
                .gates
                .iter()
                .any(|g| g.passed == Some(true) && g.units.contains(&unit.name));
            if !gate || covered {
                self.unit_to(u, UnitStatus::Completed, "all sprints complete");
            }
        }
        if !gate {
            return;
        }
        let mut layers: Vec<u32> = self.st().plan.work_units.iter().map(|u| u.layer).collect();
        layers.sort_unstable();
        layers.dedup();
        for layer in layers {
            let st = self.st();
            let in_layer: Vec<usize> = (0..st.units.len())
                .filter(|&u| st.plan.work_units[u].layer == layer)
                .collect();
            let busy = in_layer.iter().any(|&u| {
                st.units[u].status == UnitStatus::Running && !st.units[u].all_sprints_done()
            });
            let open = st
                .gates
                .iter()
                .any(|g| g.layer == layer && g.passed.is_none());
            let waiting: Vec<String> = in_layer
                .iter()
                .filter(|&&u| {
                    st.units[u].status == UnitStatus::Running && st.units[u].all_sprints_done()
                })
                .map(|&u| st.units[u].name.clone())
                .collect();
            if busy || open || waiting.is_empty() {
                continue;
            }
            let id = st.gates.len() as u32 + 1;
            self.emit(Event::GateOpened {
                id,
                layer,
                units: waiting.clone(),
                retry_of: None,
                at: self.now,
            });
            self.log(
                None,
                None,
                format!("Phase {layer} complete: build gate {id}"),
                format!("one coordinated build for {}", waiting.join(", ")),
            );
            self.effects.push(Effect::RunGate {
                gate: id,
                layer,
                units: waiting,
            });
        }
    }

    /// §4 step 4: dispatch every RUNNING unit's next sprint, within the cap and budget.
    fn dispatch_ready(&mut self) {
        for u in 0..self.st().units.len() {
            let st = self.st();
            let unit = &st.units[u];
            if unit.status != UnitStatus::Running
                || unit.active().is_some()
                || unit.awaiting_merge().is_some()
            {
                continue;
            }
            let Some(s) = unit.current() else { continue };
            let sp = &unit.sprints[s];
            let kind = match sp.status() {
                SprintStatus::Pending => DispatchKind::Fresh,
                SprintStatus::Partial if !sp.awaiting_confirmation => DispatchKind::Continuation,
                SprintStatus::Backoff => DispatchKind::Retry,
                _ => continue,
            };
            if sp.deferred_waiting || st.active_count() >= st.config.max_parallel.max(1) as usize {
                continue;
            }
            let complexity = select::complexity(&st.plan, u, s);
            let ctx = select::SelectionContext {
                failures: sp.failures,
                partial: kind == DispatchKind::Continuation,
                previous: sp.history.last().map(|h| h.tier),
            };
            let (tier, why) = select::select(&complexity, ctx);
            let cost = st.config.cost(tier);
            if let Some(budget) = st.config.budget {
                if st.cost_spent + cost > budget {
                    self.drain_for_budget(budget, cost);
                    return;
                }
            }
            let attempt = sp.attempt();
            let dispatch = DispatchId(format!(
                "{}/{}/{}/a{}d{}",
                st.id,
                unit.slug,
                sp.id,
                attempt,
                sp.dispatches + 1
            ));
            let others = st.active_count() > 0
                || st.units.iter().enumerate().any(|(i, x)| {
                    i != u && x.status == UnitStatus::Running && x.current().is_some()
                });
            let plan_unit = &st.plan.work_units[u];
            let plan_sprint = &plan_unit.sprints[s];
            let text = prompt::build(&prompt::PromptInput {
                plan: &st.plan,
                unit: plan_unit,
                sprint: plan_sprint,
                kind,
                attempt,
                last_failure: sp.last_failure.as_deref(),
                remaining: &sp.remaining,
                parallel_with_gate: st.config.build_gate && others,
            });
            let order = DispatchOrder {
                dispatch: dispatch.clone(),
                unit: unit.name.clone(),
                directory: plan_unit.directory.clone(),
                sprint: sp.id.clone(),
                sprint_name: plan_sprint.name.clone(),
                attempt,
                tier,
                model_id: st.config.model_id(tier).to_string(),
                max_turns: st.config.max_turns,
                kind,
                prompt: text,
            };
            let max = st.config.max_retries;
            self.log(
                Some(u),
                Some(s),
                format!(
                    "Model: {} (attempt {attempt}/{max}, {kind:?})",
                    tier.as_str()
                ),
                why,
            );
            self.emit(Event::Dispatched {
                unit: u,
                sprint: s,
                dispatch,
                attempt,
                tier,
                model_id: order.model_id.clone(),
                score: complexity.score,
                cost,
                kind,
                at: self.now,
            });
            self.effects.push(Effect::Dispatch(order));
        }
    }

    fn drain_for_budget(&mut self, budget: u64, next: u64) {
        let spent = self.st().cost_spent;
        for u in 0..self.st().units.len() {
            if self.st().units[u].status == UnitStatus::Running {
                self.unit_to(u, UnitStatus::Stopping, "budget reached");
            }
        }
        let text = format!("Budget reached: {spent}x spent of {budget}x; the next dispatch would cost {next}x. Draining like `stop`; raise the budget and `resume` to go on.");
        self.overall(OverallStatus::Stopping, &text);
        self.log(None, None, "Budget reached: draining".into(), text.clone());
        self.effects.push(Effect::Notify {
            kind: NoticeKind::BudgetReached,
            unit: None,
            text,
        });
    }

    /// §4 step 8: the operation's overall state follows its units.
    fn conclude(&mut self) {
        let st = self.st();
        let all_done = st.units.iter().all(|u| u.status == UnitStatus::Completed);
        let any = |f: fn(UnitStatus) -> bool| st.units.iter().any(|u| f(u.status));
        match st.status {
            OverallStatus::Completed | OverallStatus::Killed => {}
            _ if all_done => {
                let n = st.plan.total_sprints();
                let units = st.units.len();
                self.overall(OverallStatus::Completed, "all work units COMPLETED");
                self.effects.push(Effect::FinalReport);
                self.effects.push(Effect::Notify {
                    kind: NoticeKind::Completed,
                    unit: None,
                    text: format!("All {n} sprints executed across {units} work units."),
                });
            }
            OverallStatus::Stopping
                if !any(|s| matches!(s, UnitStatus::Running | UnitStatus::Stopping)) =>
            {
                let killed = any(|s| s == UnitStatus::Killed);
                let reason = st.status_reason.clone();
                if killed {
                    self.overall(OverallStatus::Killed, "stop escalated to force-termination");
                } else {
                    self.overall(
                        OverallStatus::Stopped,
                        if reason.starts_with("Budget") {
                            &reason
                        } else {
                            "stopped"
                        },
                    );
                }
            }
            // Blocked only when nothing can move: no agent in flight, no unit
            // running, and no unit whose dependencies have all completed (a unit
            // that became ready in this very pass starts on the next one).
            OverallStatus::Running
                if st.active_count() == 0
                    && !any(|s| s == UnitStatus::Running)
                    && any(|s| s == UnitStatus::Blocked)
                    && !(0..st.units.len()).any(|u| st.ready_to_start(u)) =>
            {
                self.overall(
                    OverallStatus::Blocked,
                    "every active work unit is BLOCKED; waiting for intervention",
                );
            }
            _ => {}
        }
    }
}
