//! Reading a generated plan of N work units × 10 sprints (criterion). The issue's
//! target: 1,000 × 10 under 50 ms, growing linearly.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::fmt::Write;

/// `layers`: a Layer column (every unit waits for all lower layers, ~n²/2 edges);
/// otherwise a Dependencies column with one edge per unit.
fn plan(units: usize, layers: bool) -> String {
    let mut s = String::from(if layers {
        "# Big Plan\n\n| Work Unit | Directory | Sprints | Layer |\n|---|---|---|---|\n"
    } else {
        "# Big Plan\n\n| Work Unit | Directory | Sprints | Dependencies |\n|---|---|---|---|\n"
    });
    for u in 0..units {
        if layers {
            let _ = writeln!(s, "| unit-{u} | dir{u} | 10 | {} |", u / 100);
        } else {
            let dep = if u == 0 {
                "none".to_string()
            } else {
                format!("unit-{}", u / 2)
            };
            let _ = writeln!(s, "| unit-{u} | dir{u} | 10 | {dep} |");
        }
    }
    for u in 0..units {
        let _ = writeln!(s, "\n## unit-{u}\n");
        for n in 1..=10 {
            let _ = writeln!(
                s,
                "### Sprint {n}: Implement part {n} of unit {u}\n\n**Entry criteria**:\n- [ ] Sprint {} complete\n\n**Tasks**:\n1. Create `src/part{n}.rs`\n2. Write tests in `tests/part{n}.rs`\n\n**Exit criteria**:\n- [ ] `cargo test part{n}` passes\n- [ ] `src/part{n}.rs` exists\n",
                n.max(2) - 1
            );
        }
    }
    s
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan_read");
    g.sample_size(10);
    for (name, layers) in [("graph", false), ("layers", true)] {
        for units in [100, 1000] {
            let text = plan(units, layers);
            g.throughput(Throughput::Elements(units as u64 * 10));
            g.bench_with_input(BenchmarkId::new(name, units), &text, |b, t| {
                b.iter(|| supervise::plan::parse(t, "big").expect("valid"));
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
