//! Engine throughput: 1,000 operations driven to completion through `decide`
//! and `apply`, counting every event produced (criterion, one sample ≈ 1M events);
//! and what one dispatch's model choice costs in a plan of 1,000 units.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use supervise::engine::*;

#[path = "support/ops.rs"]
mod ops;
use ops::{layered_text, operation};

/// A plan of 10 units × 10 sprints in two layers: about 1,000 events per operation.
fn plan_text() -> String {
    layered_text("Ops", 10, 5, 10)
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

criterion_group!(benches, bench);
criterion_main!(benches);
