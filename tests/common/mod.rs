//! The engine test harness shared by the engine and report tests: a story-like
//! driver that checks every invariant on every event and replays the log.
#![allow(dead_code)]

use chrono::{DateTime, Duration, TimeZone, Utc};
use supervise::engine::workflow;
use supervise::engine::*;
use supervise::plan::{self, Plan};

pub const THREE_UNITS: &str = "# Shop\n\n| Work Unit | Layer |\n|---|---|\n| api | 0 |\n| docs | 0 |\n| web | 1 |\n\n\
## api\n### Sprint 1: Create the API types\n- [ ] `make api-types` passes\n### Sprint 2: Implement the handlers\n- [ ] `make api` passes\n\
## docs\n### Sprint 1: Write the guide\n- [ ] `docs/guide.md` exists\n\
## web\n### Sprint 1: Build the page\n- [ ] `make web` passes\n";

pub fn plan(src: &str) -> Plan {
    plan::parse(src, "test").expect("test plan is valid")
}

pub struct Sim {
    pub state: Option<OperationState>,
    pub log: Vec<Event>,
    pub now: DateTime<Utc>,
    pub effects: Vec<Effect>,
    /// Answer every merge asked for at once, as a runner whose merges always
    /// succeed would (off: merges wait until the test answers them).
    pub auto_merge: bool,
}

impl Sim {
    pub fn start(src: &str, config: EngineConfig) -> Sim {
        Sim::start_with(plan(src), None, config)
    }

    /// An operation without a written plan: the workflow's first units.
    #[allow(dead_code)]
    pub fn start_workflow(workflow: workflow::Workflow, config: EngineConfig) -> Sim {
        Sim::start_with(workflow.plan(), Some(workflow), config)
    }

    fn start_with(plan: Plan, workflow: Option<workflow::Workflow>, config: EngineConfig) -> Sim {
        let mut sim = Sim {
            state: None,
            log: Vec::new(),
            now: Utc.with_ymd_and_hms(2026, 11, 22, 9, 0, 0).unwrap(),
            effects: Vec::new(),
            auto_merge: true,
        };
        sim.send(Input::Start {
            operation: OperationId("op1".into()),
            plan: Box::new(plan),
            config,
            seed: 42,
            workflow: workflow.map(Box::new),
            already_done: Vec::new(),
        })
        .unwrap();
        sim
    }

    /// Decides one input; with `auto_merge`, the merges it asks for are
    /// confirmed at once and what they cause is part of the returned decision.
    pub fn send(&mut self, input: Input) -> Result<Decision, Refusal> {
        let mut d = self.send_one(input)?;
        if self.auto_merge {
            let merges: Vec<Input> = d
                .effects
                .iter()
                .filter_map(|e| match e {
                    Effect::Integrate { unit, sprint, .. } => Some(Input::Integrated {
                        unit: unit.clone(),
                        sprint: sprint.clone(),
                    }),
                    _ => None,
                })
                .collect();
            for m in merges {
                let more = self.send(m).expect("a merge confirmation is never refused");
                d.events.extend(more.events);
                d.effects.extend(more.effects);
            }
        }
        Ok(d)
    }

    fn send_one(&mut self, input: Input) -> Result<Decision, Refusal> {
        let d = decide(self.state.as_ref(), input, self.now)?;
        for e in &d.events {
            check_invariants(self.state.as_ref(), e);
            apply(&mut self.state, e);
            self.log.push(e.clone());
        }
        assert_eq!(
            OperationState::replay(&self.log).as_ref(),
            self.state.as_ref(),
            "replaying the log gives the same state"
        );
        self.effects.extend(d.effects.iter().cloned());
        check_liveness(self.st());
        Ok(d)
    }

    pub fn st(&self) -> &OperationState {
        self.state.as_ref().unwrap()
    }

    pub fn unit(&self, name: &str) -> &UnitRun {
        &self.st().units[self.st().unit_index(name).unwrap()]
    }

    pub fn sprint_status(&self, unit: &str, i: usize) -> SprintStatus {
        self.unit(unit).sprints[i].status()
    }

    /// Dispatch orders still out (not yet finished), oldest first.
    pub fn out(&self) -> Vec<DispatchOrder> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Dispatch(o) if self.st().find_dispatch(&o.dispatch).is_some() => {
                    Some(o.clone())
                }
                _ => None,
            })
            .collect()
    }

    pub fn order_for(&self, unit: &str) -> DispatchOrder {
        self.out()
            .into_iter()
            .find(|o| o.unit == unit)
            .unwrap_or_else(|| panic!("no dispatch out for {unit}"))
    }

    /// The agent for `unit` ends with `report`, whose criteria results are
    /// read as a pattern and reported for the sprint's real criteria (see
    /// [`for_sprint`]), as a place's verifier would report them.
    pub fn finish(&mut self, unit: &str, report: AgentReport) -> Decision {
        self.now += Duration::minutes(7);
        let o = self.order_for(unit);
        let report = self.for_order(&o, report);
        self.send(Input::AgentFinished {
            dispatch: o.dispatch,
            report,
        })
        .unwrap()
    }

    /// `report` with its criteria results given for the real criteria of
    /// the sprint `o` is for (see [`for_sprint`]).
    pub fn for_order(&self, o: &DispatchOrder, mut report: AgentReport) -> AgentReport {
        let sprint = self
            .st()
            .plan
            .unit(&o.unit)
            .and_then(|u| u.sprints.iter().find(|s| s.id == o.sprint))
            .expect("the order's sprint is in the plan");
        report.evidence.criteria = for_sprint(sprint, &report.evidence.criteria);
        report
    }

    /// The agent for `unit` ends with `report` exactly as given.
    pub fn finish_as_is(&mut self, unit: &str, report: AgentReport) -> Decision {
        self.now += Duration::minutes(7);
        let o = self.order_for(unit);
        self.send(Input::AgentFinished {
            dispatch: o.dispatch,
            report,
        })
        .unwrap()
    }

    pub fn advance(&mut self, secs: i64) {
        self.now += Duration::seconds(secs);
    }
}

/// Liveness after every decision: while the operation is neither stopping nor
/// finished, a unit whose dependencies are all COMPLETED has started or some
/// agent is still in flight; and the operation is BLOCKED only when nothing can
/// be dispatched.
pub fn check_liveness(st: &OperationState) {
    if !matches!(st.status, OverallStatus::Running | OverallStatus::Blocked) {
        return;
    }
    if st.active_count() == 0 {
        // §7 by its words, not through the engine's own lookup.
        let ready = |u: usize| {
            st.units[u].status == UnitStatus::NotStarted
                && st.plan.work_units[u].depends_on.iter().all(|d| {
                    st.units
                        .iter()
                        .any(|x| &x.name == d && x.status == UnitStatus::Completed)
                })
        };
        for u in 0..st.units.len() {
            assert!(
                !ready(u),
                "{} is ready (dependencies COMPLETED) but NOT_STARTED with nothing in flight; status {}",
                st.units[u].name,
                st.status
            );
        }
    }
    if st.status == OverallStatus::Blocked {
        assert_eq!(st.active_count(), 0, "BLOCKED with agents in flight");
        assert!(
            st.units.iter().all(|u| u.status != UnitStatus::Running),
            "BLOCKED while a unit is RUNNING"
        );
    }
}

pub fn check_invariants(before: Option<&OperationState>, e: &Event) {
    let Some(st) = before else { return };
    match e {
        Event::Dispatched {
            unit,
            sprint,
            attempt,
            ..
        } => {
            let u = &st.units[*unit];
            assert!(
                !u.status.is_halted() && u.status == UnitStatus::Running,
                "dispatch while {}",
                u.status
            );
            assert!(
                u.sprints[..*sprint]
                    .iter()
                    .all(|s| s.status() == SprintStatus::Completed),
                "sprint dispatched before its predecessor completed"
            );
            assert!(
                *attempt <= st.max_attempts(*unit),
                "attempt {attempt} exceeds the unit's attempts"
            );
            assert!(u.active().is_none(), "two agents on one unit");
            assert!(
                u.awaiting_merge().is_none(),
                "sprint dispatched while an earlier one's merge is unconfirmed"
            );
        }
        Event::Unit { unit, to, .. } => {
            let from = st.units[*unit].status;
            assert!(
                from.can_become(*to),
                "illegal unit transition {from} -> {to}"
            );
            if *to == UnitStatus::Completed {
                assert!(
                    st.units[*unit].awaiting_merge().is_none(),
                    "unit completed before its merges were confirmed"
                );
            }
            if from == UnitStatus::NotStarted && *to == UnitStatus::Running {
                for d in &st.plan.work_units[*unit].depends_on {
                    let dep = &st.units[st.unit_index(d).unwrap()];
                    assert_eq!(
                        dep.status,
                        UnitStatus::Completed,
                        "dependent started before {d}"
                    );
                }
            }
        }
        Event::Sprint {
            unit, sprint, to, ..
        } => {
            let from = st.units[*unit].sprints[*sprint].status();
            assert!(
                from.can_become(*to),
                "illegal sprint transition {from} -> {to}"
            );
        }
        _ => {}
    }
}

/// Results for `sprint`'s own machine-checkable criteria, following the
/// outcomes of `pattern`: none when it is empty; every criterion passes when
/// all of it passed; otherwise the sprint's last criterion fails (with the
/// first failure's detail) and the others pass.
pub fn for_sprint(
    sprint: &supervise::plan::Sprint,
    pattern: &[CriterionResult],
) -> Vec<CriterionResult> {
    if pattern.is_empty() {
        return Vec::new();
    }
    let failure = pattern
        .iter()
        .find(|r| r.outcome == CriterionOutcome::Failed);
    let checkable: Vec<_> = sprint
        .exit_criteria
        .iter()
        .filter(|c| c.is_machine_checkable())
        .collect();
    let last = checkable.len().saturating_sub(1);
    checkable
        .iter()
        .enumerate()
        .map(|(i, c)| CriterionResult {
            line: c.line,
            text: c.text.clone(),
            outcome: match failure {
                Some(_) if i == last => CriterionOutcome::Failed,
                _ => CriterionOutcome::Passed,
            },
            detail: match failure {
                Some(f) if i == last => f.detail.clone(),
                _ => String::new(),
            },
        })
        .collect()
}

pub fn success() -> AgentReport {
    AgentReport {
        exit_code: Some(0),
        output_tail: "All checks pass. Committed.".into(),
        turns_used: Some(12),
        usage: None,
        evidence: Evidence {
            commits: vec!["a1b2c3d".into()],
            criteria: vec![CriterionResult {
                line: 1,
                text: "make passes".into(),
                outcome: CriterionOutcome::Passed,
                detail: String::new(),
            }],
            ..Default::default()
        },
    }
}

pub fn partial() -> AgentReport {
    let mut r = success();
    r.evidence.criteria.push(CriterionResult {
        line: 2,
        text: "make api passes".into(),
        outcome: CriterionOutcome::Failed,
        detail: "exit 2".into(),
    });
    r.output_tail = "Partial: handlers remaining".into();
    r
}

pub fn failure() -> AgentReport {
    AgentReport {
        exit_code: Some(1),
        output_tail: "error: could not compile".into(),
        turns_used: Some(50),
        usage: None,
        evidence: Evidence::default(),
    }
}

pub fn notices(sim: &Sim, kind: NoticeKind) -> Vec<String> {
    sim.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Notify { kind: k, text, .. } if *k == kind => Some(text.clone()),
            _ => None,
        })
        .collect()
}
