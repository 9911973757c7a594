//! The commands people give: start, name-feature, resume, stop, killall.

use super::super::naming;
use super::{
    AlreadyDone, CancelReason, Decider, Effect, Event, NoticeKind, OverallStatus, Refusal,
    SprintStatus, UnitStatus,
};

impl Decider<'_> {
    /// `start`: the operation begins, named — by its plan, or by the ritual
    /// when the plan has no name — and what is already done is recorded.
    pub(super) fn start(
        &mut self,
        operation: super::OperationId,
        plan: Box<crate::plan::Plan>,
        config: crate::engine::EngineConfig,
        seed: u64,
        workflow: Option<Box<crate::engine::workflow::Workflow>>,
        already_done: Vec<AlreadyDone>,
    ) -> Result<(), Refusal> {
        if let Some(st) = &self.state {
            return Err(Refusal::AlreadyStarted(st.name.clone()));
        }
        let name = plan
            .feature_name
            .clone()
            .unwrap_or_else(|| naming::operation_name(seed));
        let units = plan.work_units.len();
        let sprints = plan.total_sprints();
        // §2–3, the ritual: a plan that had no name gets this one in its
        // frontmatter, before the first dispatch branches from it. (Work
        // without a plan has no plan file to name.)
        let name_plan = plan.feature_name.is_none() && workflow.is_none();
        self.emit(Event::OperationStarted {
            operation,
            name: name.clone(),
            seed,
            plan,
            config,
            workflow,
            at: self.now,
        });
        self.log(
            None,
            None,
            format!("Operation named: {name}"),
            format!(
                "{}, {}",
                crate::text::count(units, "work unit"),
                crate::text::count(sprints, "sprint")
            ),
        );
        if name_plan {
            self.effects.push(Effect::NamePlan { name });
        }
        self.already_done(already_done);
        self.settle();
        Ok(())
    }

    /// `name-feature`: the operation takes the next name of its seed.
    pub(super) fn name_feature(&mut self) -> Result<(), Refusal> {
        let st = self
            .state
            .as_ref()
            .ok_or_else(|| Refusal::Ritual(naming::REPROACH.to_string()))?;
        let name = naming::operation_name(st.seed.wrapping_add(st.renames as u64 + 1));
        if st.workflow.is_none() {
            self.effects.push(Effect::NamePlan { name: name.clone() });
        }
        self.emit(Event::Renamed {
            name: name.clone(),
            at: self.now,
        });
        self.log(
            None,
            None,
            format!("Operation renamed: {name}"),
            "name-feature after start".into(),
        );
        Ok(())
    }

    /// Units that appear while the operation runs: checked as the reader
    /// checks a plan (names unique, dependencies known, no cycle, sprints to
    /// run), recorded, then started as their dependencies allow.
    pub(super) fn add_work(&mut self, units: Vec<crate::plan::WorkUnit>) -> Result<(), Refusal> {
        self.append_work(units, "work that appeared while the operation runs".into())?;
        self.settle();
        Ok(())
    }

    /// Checks and appends units (as one `WorkAdded`), saying why in the
    /// decision log; the caller settles.
    pub(super) fn append_work(
        &mut self,
        units: Vec<crate::plan::WorkUnit>,
        why: String,
    ) -> Result<(), Refusal> {
        self.require()?;
        if units.is_empty() {
            return Ok(());
        }
        let mut names: Vec<String> = self.st().units.iter().map(|u| u.name.clone()).collect();
        for u in &units {
            if u.name.trim().is_empty() {
                return Err(Refusal::BadWork("a unit needs a name".into()));
            }
            if names.contains(&u.name) {
                return Err(Refusal::BadWork(format!(
                    "there is a unit `{}` already",
                    u.name
                )));
            }
            if u.sprints.is_empty() {
                return Err(Refusal::BadWork(format!(
                    "unit `{}` has no sprints",
                    u.name
                )));
            }
            let mut ids: Vec<&str> = u.sprints.iter().map(|s| s.id.as_str()).collect();
            ids.sort();
            if ids.windows(2).any(|w| w[0] == w[1]) {
                return Err(Refusal::BadWork(format!(
                    "unit `{}` numbers two sprints alike",
                    u.name
                )));
            }
            names.push(u.name.clone());
        }
        for u in &units {
            if let Some(d) = u.depends_on.iter().find(|d| !names.contains(d)) {
                return Err(Refusal::BadWork(format!(
                    "unit `{}` depends on `{d}`, which is not a unit",
                    u.name
                )));
            }
        }
        // A cycle can only run through the new units: old ones never depend on them.
        let mut done: Vec<&str> = self.st().units.iter().map(|u| u.name.as_str()).collect();
        let mut left: Vec<&crate::plan::WorkUnit> = units.iter().collect();
        while !left.is_empty() {
            let before = left.len();
            left.retain(|u| {
                if u.depends_on.iter().all(|d| done.contains(&d.as_str())) {
                    done.push(u.name.as_str());
                    false
                } else {
                    true
                }
            });
            if left.len() == before {
                let cycle: Vec<&str> = left.iter().map(|u| u.name.as_str()).collect();
                return Err(Refusal::BadWork(format!(
                    "the dependencies of {} form a cycle",
                    cycle.join(", ")
                )));
            }
        }
        let count = units.len();
        let sprints: usize = units.iter().map(|u| u.sprints.len()).sum();
        self.emit(Event::WorkAdded {
            units,
            at: self.now,
        });
        self.log(
            None,
            None,
            format!(
                "{} added, {}",
                crate::text::count(count, "unit"),
                crate::text::count(sprints, "sprint")
            ),
            why,
        );
        // BLOCKED meant nothing could run; the new work may. (A stopped or
        // killed operation keeps it for `resume`.)
        if self.st().status == OverallStatus::Blocked {
            self.emit(Event::Overall {
                to: OverallStatus::Running,
                reason: "work added".into(),
                at: self.now,
            });
        }
        Ok(())
    }

    /// Sets the budgets given, each above what the operation has already
    /// spent and promised (one at or below it would drain again at once).
    /// Nothing resumes here: a drained operation goes on with `resume`.
    pub(super) fn set_budget(
        &mut self,
        budget: Option<u64>,
        budget_usd: Option<crate::engine::usage::Usd>,
    ) -> Result<(), Refusal> {
        let st = self.require()?;
        if st.status == OverallStatus::Completed {
            return Err(Refusal::NotAllowed(
                "the operation is complete; there is no budget to raise".into(),
            ));
        }
        if budget.is_none() && budget_usd.is_none() {
            return Err(Refusal::NotAllowed(
                "name the new budget: `--budget N` (in ×) or `--budget-usd D` (in dollars)".into(),
            ));
        }
        let spent = st.cost_committed();
        if let Some(b) = budget.filter(|&b| b <= spent) {
            return Err(Refusal::NotAllowed(format!(
                "a budget of {b}x is no more than the {spent}x already spent: give more than {spent}"
            )));
        }
        let spent_usd = st.dollars_spent();
        if let Some(b) = budget_usd.filter(|&b| b <= spent_usd) {
            return Err(Refusal::NotAllowed(format!(
                "a budget of {b} is no more than the {spent_usd} already spent: give more than that"
            )));
        }
        let (budget, budget_usd) = (
            budget.or(st.config.budget),
            budget_usd.or(st.config.budget_usd),
        );
        let shown = |x: Option<String>| x.unwrap_or_else(|| "none".into());
        let why = format!(
            "budget {}, dollar budget {}",
            shown(budget.map(|b| format!("{b}x"))),
            shown(budget_usd.map(|b| b.to_string()))
        );
        self.emit(Event::BudgetSet {
            budget,
            budget_usd,
            at: self.now,
        });
        self.log(None, None, "Budget set by a person".into(), why);
        Ok(())
    }

    pub(super) fn resume(&mut self, unit: Option<String>) -> Result<(), Refusal> {
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

    pub(super) fn stop(&mut self) -> Result<(), Refusal> {
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
            format!(
                "no new dispatches; waiting for {}",
                crate::text::count(n, "active agent")
            ),
        );
        self.effects.push(Effect::Notify {
            kind: NoticeKind::Draining,
            unit: None,
            text: format!(
                "Supervisor entering graceful shutdown. Waiting for {} to finish.",
                crate::text::count(n, "active agent")
            ),
        });
        self.settle();
        Ok(())
    }

    pub(super) fn killall(&mut self) -> Result<(), Refusal> {
        let st = self.require()?;
        if matches!(st.status, OverallStatus::Completed) {
            return Err(Refusal::NotAllowed(
                "the operation is complete; there is nothing to kill".into(),
            ));
        }
        // §11 step 3: a unit that had nothing under way and nothing done (no
        // attempt ever made: it waited for a slot or a hold) has no progress
        // to keep: it is NOT_STARTED again, not KILLED.
        let untouched: Vec<usize> = (0..st.units.len())
            .filter(|&u| {
                st.units[u].status == UnitStatus::Running
                    && st.units[u].sprints.iter().all(|s| {
                        s.active.is_none()
                            && s.history.is_empty()
                            && s.status() != SprintStatus::Completed
                    })
            })
            .collect();
        let n = self.cancel_all(CancelReason::Killall);
        for u in untouched {
            self.unit_to(u, UnitStatus::NotStarted, "killed before its first attempt");
        }
        self.overall(OverallStatus::Killed, "user invoked killall");
        self.log(
            None,
            None,
            "Kill all".into(),
            format!("{} terminated", crate::text::count(n, "agent")),
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
    pub(super) fn cancel_all(&mut self, reason: CancelReason) -> usize {
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
}
