//! The clock and the build gates (§3.5, §9, §10): stall checks, the stop
//! drain's timeout, deferred polls, and gate results charged to units.

use super::{
    CancelReason, Decider, Effect, Event, Gate, GateBlame, NoticeKind, OverallStatus, Refusal,
    UnitStatus,
};

impl Decider<'_> {
    pub(super) fn tick(&mut self) {
        let stall = self.st().config.stall_timeout_secs as i64;
        for u in 0..self.st().units.len() {
            for s in 0..self.st().units[u].sprints.len() {
                let sp = self.sprint(u, s);
                if let Some(a) = sp.active.clone() {
                    // A held dispatch has not been launched: nothing runs to stall.
                    if a.cancel.is_some() || a.held.is_some() {
                        continue;
                    }
                    let idle = (self.now - a.last_activity).num_seconds();
                    let ran = (self.now - a.dispatched_at).num_seconds();
                    let id = sp.id.clone();
                    let cap = self.st().config.max_agent_secs as i64;
                    if ran >= cap {
                        self.emit(Event::CancelRequested {
                            unit: u,
                            sprint: s,
                            reason: CancelReason::WallClock,
                            at: self.now,
                        });
                        // The cap is a hard stop: the short grace of `killall`.
                        self.effects.push(Effect::Cancel {
                            dispatch: a.id,
                            force: true,
                        });
                        self.log(
                            Some(u),
                            Some(s),
                            format!("Sprint {id} agent past its wall-clock cap: stopping"),
                            format!("running for {} min; the cap is {} min", ran / 60, cap / 60),
                        );
                    } else if idle >= stall {
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
                    text: format!(
                        "Graceful shutdown timed out; {} force-terminated.",
                        crate::text::count(n, "agent")
                    ),
                });
            }
        }
        self.settle();
    }

    pub(super) fn gate_result(
        &mut self,
        gate: u32,
        passed: bool,
        output: &str,
        blame: GateBlame,
    ) -> Result<(), Refusal> {
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
            self.gate_failed(&g, output, blame);
        }
        self.settle();
        Ok(())
    }

    /// A failed gate is charged where the failure came in: the merge the
    /// place's bisection found; nobody of the phase when the gate failed
    /// before its merges too and a unit of the layer is BLOCKED (its missing
    /// work is the cause, and re-running the others would not help); else
    /// the units its output names, after one re-run when it names none.
    fn gate_failed(&mut self, g: &Gate, output: &str, blame: GateBlame) {
        let gate = g.id;
        let tail = last_lines(&crate::scrub::scrub(output), 20);
        let shown = if tail.trim().is_empty() {
            "(the build printed nothing)".to_string()
        } else {
            tail
        };
        if let GateBlame::Merge { unit, sprint } = &blame {
            if let Some(u) = self
                .st()
                .unit_index(unit)
                .filter(|_| g.units.contains(unit))
            {
                self.log(
                    None,
                    None,
                    format!("Build gate {gate} failed (layer {})", g.layer),
                    format!("it passed before {unit} Sprint {sprint} was merged and fails after it (found by running the gate at each of the phase's merges)"),
                );
                if let Some(s) = self.st().units[u].sprints.len().checked_sub(1) {
                    if self.st().units[u].status == UnitStatus::Running {
                        self.fail(
                            u,
                            s,
                            format!("the coordinated build (gate {gate}) passed before {unit} Sprint {sprint} was merged and fails after it:\n{shown}"),
                        );
                    }
                }
                return;
            }
            // The merge of a unit BLOCKED since: the failure is still its.
            if self.blocked_with_work(g).contains(unit) {
                let why = format!(
                    "it passed before {unit} Sprint {sprint} was merged and fails after it"
                );
                self.gate_waits_for_blocked(g, std::slice::from_ref(unit), &shown, &why);
                return;
            }
        }
        if blame == GateBlame::BeforePhase {
            let st = self.st();
            let blocked: Vec<String> = (0..st.units.len())
                .filter(|&u| {
                    st.plan.work_units[u].layer == g.layer
                        && st.units[u].status == UnitStatus::Blocked
                        && !g.units.contains(&st.units[u].name)
                })
                .map(|u| st.units[u].name.clone())
                .chain(self.blocked_with_work(g))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if !blocked.is_empty() {
                let why = "it failed before this phase's merges too: none of them broke it";
                self.gate_waits_for_blocked(g, &blocked, &shown, why);
                return;
            }
        }
        let named = self.units_named_in(&g.units, output);
        // A BLOCKED unit's merges stay on the integration branch: a failure
        // its output puts there, or one nothing points at once run again,
        // is that unit's, and is never charged to the units that finished.
        let with_work = self.blocked_with_work(g);
        if named.is_empty() && !with_work.is_empty() {
            let theirs = self.units_named_in(&with_work, output);
            if !theirs.is_empty() {
                let why = format!("its output names {}", theirs.join(", "));
                self.gate_waits_for_blocked(g, &theirs, &shown, &why);
                return;
            }
            if g.retry_of.is_some() {
                let why = "it failed twice, its output names none of this phase's units, and the BLOCKED work is on the integration branch";
                self.gate_waits_for_blocked(g, &with_work, &shown, why);
                return;
            }
        }
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
            return;
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
                    format!(
                        "the coordinated build (gate {gate}) failed after this phase:\n{shown}"
                    ),
                );
            }
        }
    }

    /// The gate fails before this phase's merges as after them, and units of
    /// its layer are BLOCKED: their missing work is what it lacks. The units
    /// that finished wait, BLOCKED, with nothing charged, until a person
    /// resumes the blocked ones.
    fn gate_waits_for_blocked(&mut self, g: &Gate, blocked: &[String], shown: &str, why: &str) {
        let gate = g.id;
        let them = blocked.join(", ");
        self.log(
            None,
            None,
            format!(
                "Build gate {gate} failed (layer {}) while {them} BLOCKED",
                g.layer
            ),
            format!(
                "{why}; the failure is {them}'s, and no attempt of {} is charged",
                g.units.join(", ")
            ),
        );
        let first = crate::text::shell_quote(&blocked[0]);
        for name in &g.units {
            let Some(u) = self.st().unit_index(name) else {
                continue;
            };
            if !self.st().units[u].status.can_become(UnitStatus::Blocked) {
                continue;
            }
            self.unit_to(
                u,
                UnitStatus::Blocked,
                "build gate fails without a BLOCKED unit",
            );
            self.effects.push(Effect::Notify {
                kind: NoticeKind::Blocked,
                unit: Some(name.clone()),
                text: format!(
                    "BLOCKED: {name} is done, but build gate {gate} fails, and the failure is not its: {why}. {them} {} BLOCKED, and the build lacks its work or still holds its broken merge.\nBuild output:\n{shown}\nTo go on: fix and resume {them} (supervise resume {first}), then supervise resume {}",
                    if blocked.len() == 1 { "is" } else { "are" },
                    crate::text::shell_quote(name),
                ),
            });
        }
    }

    /// BLOCKED units of the gate's layer or before whose work reached the
    /// integration branch (a sprint merged, or one failed by a gate after
    /// its merge): their merges are still there.
    fn blocked_with_work(&self, g: &Gate) -> Vec<String> {
        let st = self.st();
        (0..st.units.len())
            .filter(|&u| {
                let run = &st.units[u];
                st.plan.work_units[u].layer <= g.layer
                    && run.status == UnitStatus::Blocked
                    && !g.units.contains(&run.name)
                    && run.sprints.iter().any(|s| {
                        s.status() == crate::engine::SprintStatus::Completed
                            || s.last_failure
                                .as_deref()
                                .is_some_and(|f| f.starts_with("the coordinated build (gate"))
                    })
            })
            .map(|u| st.units[u].name.clone())
            .collect()
    }

    /// The gate's units that a build output points at: a path under the unit's
    /// directory, or the unit's name as a word (a package or crate name).
    pub(super) fn units_named_in(&self, units: &[String], output: &str) -> Vec<String> {
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
}

/// The last `n` lines of `text`.
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
