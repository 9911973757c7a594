//! What agents' ends come to (§5, §9): attempts closed, sprints completed,
//! merged or failed, deferred conditions and manual confirmations.

use super::{
    cascade, provider, ActiveDispatch, AgentReport, AlreadyDone, AttemptRecord, CancelReason,
    Completion, CriterionResult, Decider, DispatchId, Effect, Event, Evidence, FailedCheck, Hold,
    ModelTier, NoticeKind, Refusal, SprintStatus, UnitStatus, AGENT_COMMAND_FAILED, CONFLICT,
    CONFLICT_ROUNDS, DONE_BEFORE_DISPATCH, NOT_SHOWN_DONE, UNCHARGED,
};

impl Decider<'_> {
    /// An agent was heard from (it started, or showed activity): its sprint
    /// is running, and activity is recorded at most once a second.
    pub(super) fn heard(&mut self, dispatch: &DispatchId) -> Result<(), Refusal> {
        let (u, s) = self.find(dispatch)?;
        if self.sprint(u, s).status() == SprintStatus::Dispatched {
            self.sprint_to(u, s, SprintStatus::Running);
        }
        let last = self.sprint(u, s).active.as_ref().map(|a| a.last_activity);
        // Activity is recorded at most once a second: the log stays small.
        if last.is_none_or(|l| (self.now - l).num_milliseconds() >= 1000)
            || self
                .sprint(u, s)
                .active
                .as_ref()
                .is_some_and(|a| a.stall_warned)
        {
            self.emit(Event::Activity {
                unit: u,
                sprint: s,
                at: self.now,
            });
        }
        Ok(())
    }

    /// A held dispatch was launched after all: the cap allows it now.
    pub(super) fn released(&mut self, dispatch: &DispatchId) -> Result<(), Refusal> {
        let (u, s) = self.find(dispatch)?;
        if self
            .sprint(u, s)
            .active
            .as_ref()
            .is_some_and(|a| a.held.is_some())
        {
            self.emit(Event::DispatchReleased {
                unit: u,
                sprint: s,
                at: self.now,
            });
            let id = self.sprint(u, s).id.clone();
            self.log(
                Some(u),
                Some(s),
                format!("Sprint {id} agent launched after waiting"),
                "the cap allows it now".into(),
            );
        }
        Ok(())
    }

    /// The place could not launch an agent: a failed attempt, unless the
    /// dispatch was cancelled before it ever ran.
    pub(super) fn dispatch_failed(
        &mut self,
        dispatch: &DispatchId,
        error: &str,
    ) -> Result<(), Refusal> {
        let (u, s) = self.find(dispatch)?;
        // Cancelled by killall (or a stop that timed out) before it was
        // ever launched: nothing ran, nothing failed.
        let cancel = self.sprint(u, s).active.as_ref().and_then(|a| a.cancel);
        if matches!(
            cancel,
            Some(CancelReason::Killall | CancelReason::StopTimeout)
        ) {
            self.close_attempt(u, s, "terminated", &AgentReport::default());
            self.settle();
            return Ok(());
        }
        self.close_attempt(u, s, "dispatch failed", &AgentReport::default());
        if self.sprint(u, s).status() == SprintStatus::Dispatched {
            self.sprint_to(u, s, SprintStatus::Running);
        }
        self.fail(
            u,
            s,
            format!("the runner could not launch the agent: {error}"),
        );
        self.settle();
        Ok(())
    }

    /// A merged sprint's work is no longer on the integration branch: it
    /// runs again, and people are told.
    pub(super) fn merge_lost(
        &mut self,
        unit: &str,
        sprint: &crate::plan::SprintId,
        detail: &str,
    ) -> Result<(), Refusal> {
        let (u, s) = self.locate(unit, sprint)?;
        // Idempotent: a sprint already reopened (or never completed) stays.
        if self.sprint(u, s).status() != SprintStatus::Completed {
            return Ok(());
        }
        self.emit(Event::Reopened {
            unit: u,
            sprint: s,
            at: self.now,
        });
        self.log(
            Some(u),
            Some(s),
            format!("Sprint {sprint} merge lost; back to PENDING"),
            detail.to_string(),
        );
        self.effects.push(Effect::Notify {
            kind: NoticeKind::WorkLost,
            unit: Some(unit.to_string()),
            text: format!(
                "{unit} Sprint {sprint} was merged, but its work is no longer in the integration branch ({detail}). Something moved the branch back; the sprint runs again."
            ),
        });
        self.settle();
        Ok(())
    }

    /// A dispatch waits for a cap above the operation. People are told once
    /// per operation and cap — when the first sprint starts waiting for it,
    /// or a sprint moves from one cap to another (from an agent slot to the
    /// daily budget, whose wait is hours) — never once per held sprint or
    /// per retry; the decision log has every sprint.
    pub(super) fn held(&mut self, dispatch: &DispatchId, hold: Hold) -> Result<(), Refusal> {
        let (u, s) = self.find(dispatch)?;
        let Some(active) = self.sprint(u, s).active.clone() else {
            return Ok(());
        };
        if active.cancel.is_some()
            || active
                .held
                .as_ref()
                .is_some_and(|h| h.reason == hold.reason)
        {
            return Ok(());
        }
        let new_cap = active.held.as_ref().map(|h| h.kind) != Some(hold.kind);
        let others_wait_for_it = self
            .st()
            .units
            .iter()
            .flat_map(|unit| unit.sprints.iter())
            .filter_map(|sp| sp.active.as_ref())
            .filter(|a| a.id != *dispatch)
            .any(|a| a.held.as_ref().is_some_and(|h| h.kind == hold.kind));
        self.emit(Event::DispatchHeld {
            unit: u,
            sprint: s,
            hold: hold.clone(),
            at: self.now,
        });
        let id = self.sprint(u, s).id.clone();
        let when = hold.until.map_or_else(
            || "when the cap allows".to_string(),
            |t| format!("about {} UTC", t.format("%Y-%m-%d %H:%M")),
        );
        self.log(
            Some(u),
            Some(s),
            format!("Sprint {id} agent waits to be launched"),
            format!("{}; resumes by itself {when}", hold.reason),
        );
        if new_cap && !others_wait_for_it {
            let unit = self.st().units[u].name.clone();
            self.effects.push(Effect::Notify {
                kind: NoticeKind::Held,
                unit: None,
                text: format!(
                    "Agents wait to be launched, {unit} Sprint {id} first: {}. They resume by themselves {when}; nothing is spent meanwhile. The status table lists every sprint that waits.",
                    hold.reason
                ),
            });
        }
        Ok(())
    }

    /// The provider ended the run: the attempt is closed as its, and the
    /// sprint waits (what the provider asked, else a doubling backoff) to
    /// go again on the same model. People are told when the first sprint
    /// starts waiting, not at every retry.
    fn provider_wait(
        &mut self,
        u: usize,
        s: usize,
        report: &AgentReport,
        trouble: provider::Trouble,
    ) {
        self.close_attempt(u, s, provider::OUTCOME, report);
        let n = self.sprint(u, s).provider_retries + 1;
        let secs = provider::wait_secs(&trouble, n);
        let until = self.now + chrono::Duration::seconds(secs as i64);
        let others_wait = self
            .st()
            .units
            .iter()
            .flat_map(|x| x.sprints.iter())
            .any(|sp| sp.not_before.is_some_and(|t| t > self.now) && sp.provider_retries > 0);
        self.emit(Event::ProviderWait {
            unit: u,
            sprint: s,
            status: trouble.status,
            until,
            at: self.now,
        });
        let id = self.sprint(u, s).id.clone();
        let unit = self.st().units[u].name.clone();
        let what = trouble.described();
        self.log(
            Some(u),
            Some(s),
            format!("Sprint {id}: the model provider is {what}"),
            format!(
                "not counted as an attempt ({n} of {} such runs in a row); the same model goes again in {secs} s",
                provider::PROVIDER_RETRIES
            ),
        );
        if n == 1 && !others_wait {
            self.effects.push(Effect::Notify {
                kind: NoticeKind::Held,
                unit: None,
                text: format!(
                    "Waiting on the model provider: it is {what}, {unit} Sprint {id} first. Runs it ends are not counted as attempts and go again on the same model after a wait (about {} UTC for this one); after {} in a row, one counts as failed.",
                    until.format("%H:%M"),
                    provider::PROVIDER_RETRIES
                ),
            });
        }
    }

    pub(super) fn close_attempt(
        &mut self,
        u: usize,
        s: usize,
        outcome: &str,
        report: &AgentReport,
    ) {
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
            turns: report
                .turns_used
                .or_else(|| provider::turns(&report.output_tail)),
            commits: report.evidence.commits.clone(),
            uncommitted: report.evidence.uncommitted.clone(),
            charged: a.held.is_none() && !UNCHARGED.contains(&outcome),
            usage: report.usage,
            ci_failures: report.evidence.ci_failures.clone(),
        };
        self.emit(Event::AttemptClosed {
            unit: u,
            sprint: s,
            record,
        });
    }

    pub(super) fn finished(
        &mut self,
        dispatch: &DispatchId,
        report: AgentReport,
    ) -> Result<(), Refusal> {
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
            Some(CancelReason::WallClock) => {
                self.sprint_to(u, s, SprintStatus::Running);
                self.close_attempt(u, s, "stopped: wall-clock cap", &report);
                let minutes = self.st().config.max_agent_secs / 60;
                self.fail(
                    u,
                    s,
                    format!(
                        "the agent ran past the wall-clock cap of {minutes} min and was stopped"
                    ),
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
            self.effects.push(Effect::Refund {
                dispatch: active.id.clone(),
            });
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
        if let Some(found) = report.evidence.found_done.clone() {
            let plan_sprint = &self.st().plan.work_units[u].sprints[s];
            if crate::engine::done_before::work_is_there(
                plan_sprint,
                &report.evidence.criteria,
                &found.failed_at_start,
            ) {
                self.found_done(u, s, &active, &report, &found);
                self.settle();
                return Ok(());
            }
            // A claim without the evidence is no attempt of an agent: the
            // sprint is dispatched again (as a retry, which no place skips),
            // this time to an agent, and nothing is counted or paid.
            self.close_attempt(u, s, NOT_SHOWN_DONE, &report);
            self.effects.push(Effect::Refund {
                dispatch: active.id.clone(),
            });
            self.sprint_to(u, s, SprintStatus::Backoff);
            self.settle();
            return Ok(());
        }
        let plan_sprint = &self.st().plan.work_units[u].sprints[s];
        let mut outcome = cascade::assess(plan_sprint, &report, self.st().config.max_turns);
        // What a failing command criterion printed goes with the failure:
        // the BLOCKED notice and the next attempt's prompt quote it.
        let check = FailedCheck::of(plan_sprint, &report.evidence.criteria);
        // How the CLI says it ended, where the work is not done: the
        // provider's trouble is waited out on the same model, uncounted (a
        // bounded number of times: the output is the agent's); a stop at
        // the turn limit is unfinished work, continued.
        if matches!(
            outcome,
            cascade::Outcome::Failed(_) | cascade::Outcome::Partial(_)
        ) {
            if let Some(trouble) = provider::trouble(&report.output_tail) {
                if self.sprint(u, s).provider_retries < provider::PROVIDER_RETRIES {
                    self.provider_wait(u, s, &report, trouble);
                    self.settle();
                    return Ok(());
                }
                outcome = cascade::Outcome::Failed(format!(
                    "the model provider ended {} runs in a row (last: {})",
                    provider::PROVIDER_RETRIES + 1,
                    trouble.described()
                ));
            } else if provider::hit_turn_limit(&report.output_tail) {
                if let cascade::Outcome::Failed(reason) = &outcome {
                    outcome = cascade::Outcome::Partial(vec![format!(
                        "the agent stopped at its turn limit before finishing ({reason})"
                    )]);
                }
            }
        }
        let label = match &outcome {
            cascade::Outcome::Completed => "completed",
            cascade::Outcome::Partial(_) => "partial",
            cascade::Outcome::Failed(_) => "failed",
            cascade::Outcome::Waiting => "waiting",
            cascade::Outcome::AwaitConfirmation => "awaiting confirmation",
            cascade::Outcome::Conflict(_) => CONFLICT,
        };
        self.close_attempt(u, s, label, &report);
        let id = self.sprint(u, s).id.clone();
        match outcome {
            cascade::Outcome::Completed => {
                let (unit, _) = self.names(u, s);
                let checked = match &self.st().workflow {
                    Some(w) => w.check_answer(
                        &unit,
                        report.evidence.answer.as_deref(),
                        self.st().config.max_turns,
                    ),
                    None => Ok(()),
                };
                match checked {
                    Ok(()) => self.complete(u, s, &active, &report),
                    Err(why) => self.fail(u, s, why),
                }
            }
            cascade::Outcome::Partial(remaining) => {
                let max = self.st().config.max_continuations;
                let (unit, _) = self.names(u, s);
                let single_shot = self
                    .st()
                    .workflow
                    .as_ref()
                    .is_some_and(|w| w.partial_is_failure(&unit));
                if single_shot {
                    self.fail_with(
                        u,
                        s,
                        format!("still failing: {}", remaining.join("; ")),
                        check,
                    );
                } else if self.sprint(u, s).continuations >= max {
                    self.fail_with(
                        u,
                        s,
                        format!(
                            "still partial after {max} continuations; remaining: {}",
                            remaining.join("; ")
                        ),
                        check,
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
                        check,
                        at: self.now,
                    });
                }
            }
            cascade::Outcome::Failed(reason) => self.fail_with(u, s, reason, check),
            cascade::Outcome::Conflict(conflict) => self.conflict(u, s, conflict),
            cascade::Outcome::Waiting => {
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
            cascade::Outcome::AwaitConfirmation => {
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

    pub(super) fn complete(
        &mut self,
        u: usize,
        s: usize,
        active: &ActiveDispatch,
        report: &AgentReport,
    ) {
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
            criteria: cascade::own_results(
                &self.st().plan.work_units[u].sprints[s],
                &report.evidence.criteria,
            ),
            already_done: None,
            awaiting_merge: true,
            answer: report.evidence.answer.clone(),
        };
        let id = self.sprint(u, s).id.clone();
        let (what, why) = match completion.on_agents_word() {
            None => (
                format!("Sprint {id} COMPLETED"),
                "verification cascade confirmed the exit criteria".to_string(),
            ),
            // Nothing a machine can check: said as it is, never as verified.
            Some(_) => (
                format!("Sprint {id} {}", crate::engine::completed_words(&completion)),
                "no criterion a machine can check: the agent says it is done and a person should review it".to_string(),
            ),
        };
        self.completed_sprint(u, s, completion, &active.id, what, why);
    }

    /// Records a verified completion and asks for the sprint's merge (the
    /// unit's next sprint and its dependents wait for it).
    fn completed_sprint(
        &mut self,
        u: usize,
        s: usize,
        completion: Completion,
        dispatch: &DispatchId,
        what: String,
        why: String,
    ) {
        self.emit(Event::SprintCompleted {
            unit: u,
            sprint: s,
            completion,
        });
        self.log(Some(u), Some(s), what, why);
        // Reviews that came while this fix round ran: the next round, now,
        // rather than a merge its reviewers already asked to change.
        let queued = self.sprint(u, s).review_queue.clone();
        if !queued.is_empty() {
            self.review_round(u, s, queued);
            return;
        }
        let (unit, sprint) = self.names(u, s);
        self.effects.push(Effect::Integrate {
            unit,
            sprint,
            dispatch: dispatch.clone(),
        });
    }

    /// A fresh sprint whose work was found on the head it was to start from:
    /// COMPLETED without an agent, and not paid for. Its branch (which holds
    /// nothing new) is merged as any other, so the unit moves on as usual.
    fn found_done(
        &mut self,
        u: usize,
        s: usize,
        active: &ActiveDispatch,
        report: &AgentReport,
        found: &crate::engine::FoundDone,
    ) {
        self.close_attempt(u, s, DONE_BEFORE_DISPATCH, report);
        self.effects.push(Effect::Refund {
            dispatch: active.id.clone(),
        });
        let note = format!(
            "found done before dispatch: every exit criterion passes on {}; done by {}",
            crate::text::short_id(&found.head),
            found.by
        );
        let completion = Completion {
            started_at: self.now,
            completed_at: self.now,
            tier: active.tier,
            score: active.score,
            attempts: 0,
            turns: None,
            commits: Vec::new(),
            criteria: cascade::own_results(
                &self.st().plan.work_units[u].sprints[s],
                &report.evidence.criteria,
            ),
            already_done: Some(note.clone()),
            awaiting_merge: true,
            answer: None,
        };
        let id = self.sprint(u, s).id.clone();
        self.completed_sprint(
            u,
            s,
            completion,
            &active.id,
            format!("Sprint {id} already done: COMPLETED without an agent"),
            note,
        );
    }

    /// A verified sprint that cannot be merged without a person: its unit is
    /// BLOCKED (nothing after it may branch from an integration branch that
    /// lacks it) and the person is told how to go on.
    pub(super) fn merge_blocked(&mut self, u: usize, s: usize, error: &str) {
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
    pub(super) fn integrate_again(&mut self, u: usize) {
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
    pub(super) fn already_done(&mut self, found: Vec<AlreadyDone>) {
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
                    answer: None,
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
    pub(super) fn confirm(&mut self, u: usize, s: usize, criteria: Vec<CriterionResult>) {
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
            held: None,
            cost: 0,
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
    /// A sprint whose work no longer merges: a conflict round — a
    /// continuation on the same model whose one task is the merge — up to
    /// [`CONFLICT_ROUNDS`]; then its unit is BLOCKED for a person, the
    /// conflict named. A conflict is nobody's failure: no attempt is
    /// counted and no stronger model is paid for.
    fn conflict(&mut self, u: usize, s: usize, conflict: String) {
        let id = self.names(u, s).1;
        let sp = self.sprint(u, s);
        // Rounds since the last resume: a person who resumes gives it new ones.
        let rounds = sp.history[sp.rounds_before_reset.min(sp.history.len())..]
            .iter()
            .filter(|r| r.outcome == CONFLICT)
            .count();
        if rounds > CONFLICT_ROUNDS {
            // A round whose work was refused is why it still conflicts: say so.
            let refused = sp
                .last_failure
                .as_deref()
                .filter(|f| f.starts_with("the work was refused"))
                .map(|f| format!("{conflict}; a round's work was not taken: {f}"));
            self.block(
                u,
                s,
                format!("still does not merge after {CONFLICT_ROUNDS} conflict rounds"),
                refused.as_deref().unwrap_or(&conflict),
            );
            return;
        }
        self.sprint_to(u, s, SprintStatus::Partial);
        self.log(
            Some(u),
            Some(s),
            format!(
                "Sprint {id} CONFLICT (round {}/{CONFLICT_ROUNDS})",
                rounds.max(1)
            ),
            conflict.clone(),
        );
        let task = format!(
            "this sprint's work is done but its branch no longer merges into the integration branch: {conflict}. Merge the integration branch into this branch, resolve every conflict so both sides' changes are kept, make the exit criteria pass again, and commit the merge. Do not redo the sprint's work: it is on this branch already."
        );
        self.emit(Event::ContinuationCounted {
            unit: u,
            sprint: s,
            remaining: vec![task],
            check: None,
            at: self.now,
        });
    }

    pub(super) fn fail(&mut self, u: usize, s: usize, reason: String) {
        self.fail_with(u, s, reason, None);
    }

    /// A failure counted with what its failing command criterion printed.
    fn fail_with(&mut self, u: usize, s: usize, reason: String, check: Option<FailedCheck>) {
        self.emit(Event::FailureCounted {
            unit: u,
            sprint: s,
            reason: reason.clone(),
            check,
            at: self.now,
        });
        self.sprint_to(u, s, SprintStatus::Backoff);
        let failures = self.sprint(u, s).failures;
        let max = self.st().max_attempts(u);
        let (_, id) = self.names(u, s);
        if failures >= max {
            self.block(u, s, format!("failed after {max} attempts"), &reason);
        } else {
            self.log(
                Some(u),
                Some(s),
                format!("Sprint {id} BACKOFF (attempt {failures}/{max} failed)"),
                reason,
            );
        }
    }

    /// The sprint is FATAL and its unit BLOCKED, `why` (`failed after 3
    /// attempts`) and the last failure said in the decision log and, unless
    /// a workflow answers it, in the BLOCKED notice.
    fn block(&mut self, u: usize, s: usize, why: String, last: &str) {
        let (unit, id) = self.names(u, s);
        let absorbed = self
            .st()
            .workflow
            .as_ref()
            .is_some_and(|w| w.absorbs_failure(&unit));
        // FATAL is reached through BACKOFF: a sprint blocked straight from
        // its attempt (conflict rounds spent) passes it, or it would stay
        // RUNNING, and `resume` (FATAL → PENDING) would find nothing to do.
        if !self.sprint(u, s).status().can_become(SprintStatus::Fatal) {
            self.sprint_to(u, s, SprintStatus::Backoff);
        }
        self.sprint_to(u, s, SprintStatus::Fatal);
        self.unit_to(u, UnitStatus::Blocked, "sprint FATAL");
        self.log(
            Some(u),
            Some(s),
            format!("Sprint {id} FATAL; {unit} BLOCKED"),
            format!("{why}; last failure: {last}"),
        );
        if absorbed {
            // The workflow answers this failure (the next debug round, the
            // research threshold); a BLOCKED notice would ask a person
            // for what needs none.
            return;
        }
        let text = self.st().blocked(u, s, why, Some(last)).text();
        self.effects.push(Effect::Notify {
            kind: NoticeKind::Blocked,
            unit: Some(unit.clone()),
            text,
        });
    }

    pub(super) fn condition(
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
}
