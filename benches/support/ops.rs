//! Operations driven through the engine for the benchmarks: plans of many
//! units in layers, and an agent that fails every third dispatch once.
#![allow(dead_code)] // each benchmark uses what it needs

use chrono::{Duration, TimeZone, Utc};
use supervise::engine::*;

pub fn report(ok: bool) -> AgentReport {
    AgentReport {
        exit_code: Some(if ok { 0 } else { 1 }),
        output_tail: if ok { "done".into() } else { "error".into() },
        turns_used: Some(10),
        usage: None,
        evidence: Evidence {
            commits: if ok { vec!["abc1234".into()] } else { vec![] },
            criteria: vec![CriterionResult {
                line: 1,
                text: "x".into(),
                outcome: if ok {
                    CriterionOutcome::Passed
                } else {
                    CriterionOutcome::Failed
                },
                detail: String::new(),
            }],
            ..Default::default()
        },
    }
}

/// Runs one operation to the end; returns the number of events it produced.
pub fn operation(
    plan: &supervise::plan::Plan,
    n: u64,
    mut record: Option<&mut Vec<Event>>,
) -> usize {
    let mut now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    // As the service's driver holds it (`decide_shared`).
    let mut state: Option<std::sync::Arc<OperationState>> = None;
    let mut events = 0;
    let mut pending: Vec<DispatchId> = Vec::new();
    let mut step = |input: Input,
                    now: chrono::DateTime<Utc>,
                    state: &mut Option<std::sync::Arc<OperationState>>,
                    pending: &mut Vec<DispatchId>| {
        // Merges are confirmed at once, as a runner whose merges succeed would.
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let d = decide_shared(state, input, now).expect("accepted");
            if let Some(log) = record.as_deref_mut() {
                log.extend(d.events.iter().cloned());
            }
            events += d.events.len();
            for e in d.effects {
                match e {
                    Effect::Dispatch(o) => pending.push(o.dispatch),
                    Effect::Integrate { unit, sprint, .. } => {
                        inputs.push(Input::Integrated { unit, sprint })
                    }
                    _ => {}
                }
            }
        }
    };
    step(
        Input::Start {
            operation: OperationId(format!("op{n}")),
            plan: Box::new(plan.clone()),
            config: EngineConfig::default(),
            seed: n,
            workflow: None,
            already_done: Vec::new(),
        },
        now,
        &mut state,
        &mut pending,
    );
    let mut i = 0u64;
    while let Some(d) = pending.pop() {
        now += Duration::seconds(30);
        i += 1;
        step(
            Input::AgentActivity {
                dispatch: d.clone(),
            },
            now,
            &mut state,
            &mut pending,
        );
        step(Input::Tick, now, &mut state, &mut pending);
        // Every third dispatch fails once, so retries and model upgrades are exercised.
        step(
            Input::AgentFinished {
                dispatch: d,
                report: report(!i.is_multiple_of(3)),
            },
            now,
            &mut state,
            &mut pending,
        );
    }
    assert_eq!(
        state.as_ref().map(|s| s.status),
        Some(OverallStatus::Completed)
    );
    events
}

/// `units` units of `sprints` sprints each, in layers of `per_layer`.
pub fn layered_text(title: &str, units: usize, per_layer: usize, sprints: usize) -> String {
    let mut s = format!("# {title}\n\n| Work Unit | Layer |\n|---|---|\n");
    for u in 0..units {
        s.push_str(&format!("| u{u} | {} |\n", u / per_layer));
    }
    for u in 0..units {
        s.push_str(&format!("\n## u{u}\n"));
        for n in 1..=sprints {
            s.push_str(&format!(
                "### Sprint {n}: Implement part {n}\n- [ ] `make u{u}-{n}` passes\n"
            ));
        }
    }
    s
}
