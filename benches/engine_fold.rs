//! Engine throughput: 1,000 operations driven to completion through `decide`
//! and `apply`, counting every event produced (criterion, one sample ≈ 1M events).

use chrono::{Duration, TimeZone, Utc};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use supervise::engine::*;

const PLAN: &str = "# Ops\n\n| Work Unit | Layer |\n|---|---|\n| a | 0 |\n| b | 0 |\n| c | 1 |\n\n\
## a\n### Sprint 1: Implement a1\n- [ ] `make a1` passes\n### Sprint 2: Implement a2\n- [ ] `make a2` passes\n\
## b\n### Sprint 1: Implement b1\n- [ ] `make b1` passes\n## c\n### Sprint 1: Implement c1\n- [ ] `make c1` passes\n";

fn report(ok: bool) -> AgentReport {
    AgentReport {
        exit_code: Some(if ok { 0 } else { 1 }),
        output_tail: if ok { "done".into() } else { "error".into() },
        turns_used: Some(10),
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
fn operation(plan: &supervise::plan::Plan, n: u64) -> usize {
    let mut now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let mut state: Option<OperationState> = None;
    let mut events = 0;
    let mut pending: Vec<DispatchId> = Vec::new();
    let mut step =
        |input: Input, state: &mut Option<OperationState>, pending: &mut Vec<DispatchId>| {
            let d = decide(state.as_ref(), input, now).expect("accepted");
            for e in &d.events {
                apply(state, e);
            }
            events += d.events.len();
            for e in d.effects {
                if let Effect::Dispatch(o) = e {
                    pending.push(o.dispatch);
                }
            }
        };
    step(
        Input::Start {
            operation: OperationId(format!("op{n}")),
            plan: Box::new(plan.clone()),
            config: EngineConfig::default(),
            seed: n,
        },
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
            &mut state,
            &mut pending,
        );
        step(Input::Tick, &mut state, &mut pending);
        // Every third dispatch fails once, so retries and model upgrades are exercised.
        step(
            Input::AgentFinished {
                dispatch: d,
                report: report(i % 3 != 0),
            },
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

fn bench(c: &mut Criterion) {
    let plan = supervise::plan::parse(PLAN, "ops").unwrap();
    let per_op = operation(&plan, 0);
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    g.throughput(Throughput::Elements(per_op as u64 * 1000));
    g.bench_function("1000_operations", |b| {
        b.iter(|| (0..1000).map(|n| operation(&plan, n)).sum::<usize>());
    });
    g.finish();
    // Replay: fold a recorded log of the same size.
    let mut log = Vec::new();
    let d = decide(
        None,
        Input::Start {
            operation: OperationId("r".into()),
            plan: Box::new(plan.clone()),
            config: EngineConfig::default(),
            seed: 1,
        },
        Utc::now(),
    )
    .unwrap();
    log.extend(d.events);
    c.bench_function("replay_start_log", |b| {
        b.iter(|| OperationState::replay(&log))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
