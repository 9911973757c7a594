//! What a new state implies, applied until nothing changes: units start,
//! finish or wait at a gate, ready sprints are dispatched, the operation
//! concludes.

use super::{
    prompt, select, workflow, Decider, DispatchId, DispatchKind, DispatchOrder, Effect, Event,
    NoticeKind, OverallStatus, SprintStatus, UnitStatus,
};
use crate::engine::usage::Usd;

impl Decider<'_> {
    pub(super) fn settle(&mut self) {
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
    pub(super) fn activate_units(&mut self) {
        if self.st().status != OverallStatus::Running {
            return;
        }
        // Starting a unit changes no other unit's readiness.
        for u in self.st().ready_to_start() {
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

    /// Stopping units with nothing in flight stop; finished units complete, behind
    /// the build gate of their layer when one is configured (§3.5).
    pub(super) fn finish_units(&mut self) {
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

    /// §4 step 4: dispatch every RUNNING unit's next sprint, within the cap and
    /// budget. When the cap leaves fewer places than there are units waiting,
    /// the unit with the longest remaining path (its own sprints left plus the
    /// longest chain of sprints waiting on it) goes first: the end of the
    /// operation is set by that path, and plan order would leave it waiting.
    pub(super) fn dispatch_ready(&mut self) {
        // Agents in flight, counted once and kept up to date below (each
        // dispatch makes one more), rather than recounted over every sprint
        // for every unit.
        let mut active = self.st().active_count();
        let cap = self.st().config.max_parallel.get() as usize;
        // With every place taken nothing below can be dispatched: most
        // decisions of a busy operation end here.
        if active >= cap {
            return;
        }
        let (order, reordered) = self.dispatch_order(active);
        for u in order {
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
            if sp.deferred_waiting || active >= cap {
                continue;
            }
            // Waiting out the model provider's trouble (a tick goes on).
            if kind == DispatchKind::Retry && sp.not_before.is_some_and(|t| t > self.now) {
                continue;
            }
            let complexity = select::complexity(&st.plan, st.graph(), u, s);
            let ctx = select::SelectionContext {
                failures: sp.failures,
                partial: kind == DispatchKind::Continuation,
                previous: sp.history.last().map(|h| h.tier),
                round: match sp.history.last() {
                    _ if kind != DispatchKind::Continuation => None,
                    Some(h) if h.outcome == super::CONFLICT => Some(select::Round::Conflict),
                    _ if !sp.review.is_empty() => Some(select::Round::Review),
                    _ => None,
                },
            };
            let (tier, mut why) = select::select(&complexity, ctx);
            if let Some(path) = reordered.get(&u) {
                why.push_str(&format!(
                    "; dispatched before units earlier in the plan: the longest remaining path ({path} sprints) while the cap of {} binds",
                    st.config.max_parallel
                ));
            }
            let cost = st.config.cost(tier);
            if let Some(budget) = st.config.budget {
                let spent = st.cost_committed();
                if spent + cost > budget {
                    let more = (budget * 2).max(spent + cost);
                    self.drain_for_budget(
                        format!("Budget reached: {spent}x spent of {budget}x; the next dispatch would cost {cost}x."),
                        &format!("--budget {more}"),
                        &more.to_string(),
                    );
                    return;
                }
            }
            // Checked on what the next attempt is expected to cost, before it
            // starts: the cap is passed by no more than what attempts cost
            // beyond what they were expected to.
            if let Some(cap) = st.config.budget_usd {
                let (spent, foreseen) = (st.dollars_spent(), st.dollars_foreseen());
                let next = st.expected_dollars(tier);
                if spent + foreseen + next > cap {
                    let foreseen = match foreseen {
                        Usd::ZERO => String::new(),
                        f => format!(
                            " and {f} expected of attempts in flight or that reported no cost"
                        ),
                    };
                    let more = (cap + cap).to_string();
                    self.drain_for_budget(
                        format!("Budget reached: {spent} spent{foreseen}, of a {cap} budget; the next attempt, on {}, is expected to cost {next}.", tier.as_str()),
                        &format!("--budget-usd {}", more.trim_start_matches('$')),
                        &more,
                    );
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
            let others = active > 0
                || st.units.iter().enumerate().any(|(i, x)| {
                    i != u && x.status == UnitStatus::Running && x.current().is_some()
                });
            let plan_unit = &st.plan.work_units[u];
            let plan_sprint = &plan_unit.sprints[s];
            let workflow = st.workflow.as_ref();
            let plan_file = match workflow {
                Some(w) => w.plan_file(&unit.name),
                None => Some("EXECUTION_PLAN.md".to_string()),
            };
            let text = prompt::build(&prompt::PromptInput {
                plan_file: plan_file.as_deref(),
                plan: &st.plan,
                unit: plan_unit,
                sprint: plan_sprint,
                kind,
                attempt,
                last_failure: sp.last_failure.as_deref(),
                failed_check: sp.failed_check.as_ref(),
                remaining: &sp.remaining,
                ci_report: sp.history.last().map_or(&[], |r| r.ci_failures.as_slice()),
                review: &sp.review,
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
                answer_file: workflow.and_then(|w| w.answer_file(&unit.name)),
            };
            let max = st.max_attempts(u);
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
            active += 1;
            debug_assert_eq!(active, self.st().active_count());
            self.effects.push(Effect::Dispatch(order));
        }
    }

    /// Drains like `stop`, saying `why` (which begins "Budget reached:").
    /// `flag` and `amount` are a raise to type: twice the budget, or what
    /// the next dispatch needs when that is more.
    pub(super) fn drain_for_budget(&mut self, why: String, flag: &str, amount: &str) {
        for u in 0..self.st().units.len() {
            if self.st().units[u].status == UnitStatus::Running {
                self.unit_to(u, UnitStatus::Stopping, "budget reached");
            }
        }
        let text = format!("{why} Draining like `stop`; to go on, raise it as you resume: `supervise resume {flag}` (on GitHub: `/supervise budget {amount}`, then `/supervise resume`).");
        self.overall(OverallStatus::Stopping, &text);
        self.log(None, None, "Budget reached: draining".into(), text.clone());
        self.effects.push(Effect::Notify {
            kind: NoticeKind::BudgetReached,
            unit: None,
            text,
        });
    }

    /// §4 step 8: the operation's overall state follows its units — or, for
    /// work without a written plan, what its workflow makes of them.
    pub(super) fn conclude(&mut self) {
        if self.workflow_step() {
            return;
        }
        let st = self.st();
        let all_done = st.units.iter().all(|u| u.status == UnitStatus::Completed);
        let any = |f: fn(UnitStatus) -> bool| st.units.iter().any(|u| f(u.status));
        match st.status {
            OverallStatus::Completed | OverallStatus::Killed => {}
            _ if all_done => self.completed("all work units COMPLETED"),
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
            // (Cheapest first: this guard is asked at every pass of every
            // decision.)
            OverallStatus::Running
                if !any(|s| s == UnitStatus::Running)
                    && any(|s| s == UnitStatus::Blocked)
                    && st.active_count() == 0
                    && st.ready_to_start().is_empty() =>
            {
                self.overall(
                    OverallStatus::Blocked,
                    "every active work unit is BLOCKED; waiting for intervention",
                );
            }
            _ => {}
        }
    }

    fn completed(&mut self, why: &str) {
        let text = self.st().executed_line();
        self.overall(OverallStatus::Completed, why);
        self.effects.push(Effect::FinalReport);
        self.effects.push(Effect::Notify {
            kind: NoticeKind::Completed,
            unit: None,
            text,
        });
    }

    /// A workflow's turn: once nothing in a running operation can move, it
    /// adds the next phase, ends the operation, or stops it with a
    /// diagnostic. `true` when it did any of these.
    fn workflow_step(&mut self) -> bool {
        let st = self.st();
        let Some(workflow) = st.workflow.as_ref() else {
            return false;
        };
        let idle = st.status == OverallStatus::Running
            && !st
                .units
                .iter()
                .any(|u| matches!(u.status, UnitStatus::Running | UnitStatus::Stopping))
            && st.active_count() == 0
            && st.ready_to_start().is_empty();
        if !idle {
            return false;
        }
        match workflow.next(st) {
            workflow::Next::Nothing => false,
            workflow::Next::Add { units, why } => {
                if let Err(refused) = self.append_work(units, why) {
                    self.workflow_blocked(&format!(
                        "the workflow's next work cannot be added: {refused}"
                    ));
                }
                true
            }
            workflow::Next::Finish { why } => {
                self.log(None, None, "Workflow complete".into(), why.clone());
                self.completed(&format!("workflow complete: {why}"));
                true
            }
            workflow::Next::Block { why } => {
                self.workflow_blocked(&why);
                true
            }
        }
    }

    fn workflow_blocked(&mut self, why: &str) {
        let first = why.lines().next().unwrap_or(why).to_string();
        self.overall(
            OverallStatus::Blocked,
            &format!("workflow stopped: {first}"),
        );
        self.log(None, None, "Workflow BLOCKED".into(), why.to_string());
        self.effects.push(Effect::Notify {
            kind: NoticeKind::Blocked,
            unit: None,
            text: format!("BLOCKED: the workflow cannot go on.\n{why}"),
        });
    }

    /// The order units are offered places in, and for units moved ahead of
    /// plan order, the length (in sprints) of their remaining path.
    fn dispatch_order(
        &self,
        active: usize,
    ) -> (Vec<usize>, std::collections::HashMap<usize, usize>) {
        let st = self.st();
        let n = st.units.len();
        let plan_order: Vec<usize> = (0..n).collect();
        let waiting = (0..n)
            .filter(|&u| {
                let unit = &st.units[u];
                unit.status == UnitStatus::Running
                    && unit.active().is_none()
                    && unit.awaiting_merge().is_none()
                    && unit.current().is_some()
            })
            .count();
        let free = (st.config.max_parallel.get() as usize).saturating_sub(active);
        if waiting <= free || free == 0 {
            return (plan_order, Default::default());
        }
        let path = st.remaining_paths();
        let mut order = plan_order.clone();
        // Stable: plan order among equals.
        order.sort_by(|a, b| path[*b].cmp(&path[*a]));
        // Moved ahead: a unit earlier in the plan now comes after it, that is,
        // the least unit after it is less than it (a suffix minimum: asking
        // each unit about all those after it was quadratic in the units).
        let mut least_after = usize::MAX;
        let mut moved = std::collections::HashMap::new();
        for &u in order.iter().rev() {
            if least_after < u {
                moved.insert(u, path[u]);
            }
            least_after = least_after.min(u);
        }
        (order, moved)
    }
}
