//! Engine throughput: 1,000 operations driven to completion through `decide`
//! and `apply`, counting every event produced (criterion, one sample ≈ 1M events);
//! and what one dispatch's model choice costs in a plan of 1,000 units.

use chrono::{Duration, TimeZone, Utc};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use supervise::engine::*;

/// A plan of 10 units × 10 sprints in two layers: about 1,000 events per operation.
fn plan_text() -> String {
    layered_text("Ops", 10, 5, 10)
}

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
fn operation(plan: &supervise::plan::Plan, n: u64, mut record: Option<&mut Vec<Event>>) -> usize {
    let mut now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let mut state: Option<OperationState> = None;
    let mut events = 0;
    let mut pending: Vec<DispatchId> = Vec::new();
    let mut step = |input: Input,
                    now: chrono::DateTime<Utc>,
                    state: &mut Option<OperationState>,
                    pending: &mut Vec<DispatchId>| {
        // Merges are confirmed at once, as a runner whose merges succeed would.
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let d = decide_mut(state, input, now).expect("accepted");
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

fn bench(c: &mut Criterion) {
    let plan = supervise::plan::parse(&plan_text(), "ops").unwrap();
    let per_op = operation(&plan, 0, None);
    println!(
        "events per operation: {per_op}; per sample: {}",
        per_op * 1000
    );
    let mut g = c.benchmark_group("engine");
    g.sample_size(10);
    g.throughput(Throughput::Elements(per_op as u64 * 1000));
    g.bench_function("1000_operations", |b| {
        b.iter(|| (0..1000).map(|n| operation(&plan, n, None)).sum::<usize>());
    });
    g.finish();
    // Replay: fold one recorded operation's whole log back into its state.
    let mut log = Vec::new();
    operation(&plan, 7, Some(&mut log));
    c.bench_function("replay_one_operation_log", |b| {
        b.iter(|| OperationState::replay(&log))
    });
    // The model choice of one sprint of this plan (once per dispatch).
    c.bench_function("complexity_in_10_units", |b| {
        let graph = plan.graph();
        b.iter(|| select::complexity(&plan, &graph, 0, 0).dependents)
    });
    // The model choice of a sprint in the lowest of ten layers of 1,000
    // units: every unit above waits on it (about 450,000 edges to walk).
    let layered = supervise::plan::parse(&layered_text("Layers", 1000, 100, 2), "layers").unwrap();
    c.bench_function("complexity_lowest_layer_of_1000_units", |b| {
        let graph = layered.graph();
        b.iter(|| select::complexity(&layered, &graph, 0, 0).dependents)
    });
    // A whole operation over a large plan: 400 units of 2 sprints in four
    // layers, the cap binding all along (each decision orders the waiting
    // units by their longest remaining path).
    let large = supervise::plan::parse(&layered_text("Layers", 400, 100, 2), "layers").unwrap();
    let mut g = c.benchmark_group("large_plan");
    g.sample_size(10);
    g.bench_function("operation_over_400_units", |b| {
        b.iter(|| operation(&large, 0, None))
    });
    g.finish();
}

/// `units` units of `sprints` sprints each, in layers of `per_layer`.
fn layered_text(title: &str, units: usize, per_layer: usize, sprints: usize) -> String {
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

criterion_group!(benches, bench);
criterion_main!(benches);
