//! The clock and the build gates (§3.5, §9, §10): stall checks, the stop
//! drain's timeout, deferred polls, and gate results charged to units.

use super::{CancelReason, Decider, Effect, Event, NoticeKind, OverallStatus, Refusal, UnitStatus};

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
