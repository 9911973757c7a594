//! The commands people give: resume, stop, killall.

#[allow(unused_imports)]
use super::*;

impl Decider<'_> {
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

    pub(super) fn killall(&mut self) -> Result<(), Refusal> {
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
