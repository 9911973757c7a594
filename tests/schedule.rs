//! Scheduling quality: the real engine, driven with a virtual clock over
//! generated plans (random dependency graphs, random sprint durations, failures
//! that cost a retry), finishes close to the lower bound any schedule has:
//! max(critical path, total work / max_parallel).
//!
//! `cargo nextest run --test schedule --no-capture` prints the figures.

mod common;

use common::*;
use std::collections::HashMap;
use supervise::engine::*;

/// A small deterministic generator (the plans repeat run to run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Generated {
    src: String,
    /// Minutes each attempt of a sprint takes, by (unit, sprint number).
    minutes: HashMap<(String, usize), i64>,
    /// Sprints whose first attempt fails.
    fails_once: Vec<(String, usize)>,
}

fn generate(rng: &mut Lcg) -> Generated {
    let units = 3 + rng.below(10) as usize;
    let mut src = String::from("# Sim\n\n| Work Unit | Dependencies |\n|---|---|\n");
    let mut minutes = HashMap::new();
    let mut fails_once = Vec::new();
    for u in 0..units {
        let deps: Vec<String> = (0..u)
            .filter(|_| rng.below(4) == 0)
            .map(|d| format!("u{d}"))
            .collect();
        let deps = if deps.is_empty() {
            "none".to_string()
        } else {
            deps.join(", ")
        };
        src.push_str(&format!("| u{u} | {deps} |\n"));
    }
    for u in 0..units {
        src.push_str(&format!("\n## u{u}\n"));
        for s in 1..=1 + rng.below(5) as usize {
            src.push_str(&format!(
                "### Sprint {s}: Step {s}\n- [ ] `make u{u}-{s}` passes\n"
            ));
            minutes.insert((format!("u{u}"), s), 5 + rng.below(56) as i64);
            if rng.below(10) == 0 {
                fails_once.push((format!("u{u}"), s));
            }
        }
    }
    Generated {
        src,
        minutes,
        fails_once,
    }
}

/// Runs the plan to the end; returns (makespan, lower bound) in minutes.
fn simulate(g: &Generated, cap: u32) -> (i64, i64) {
    let cfg = EngineConfig {
        max_parallel: std::num::NonZeroU32::new(cap).unwrap(),
        ..Default::default()
    };
    let mut sim = Sim::start(&g.src, cfg);
    let start = sim.now;
    let mut failed: Vec<(String, usize)> = Vec::new();
    // Dispatch id → when it ends.
    let mut running: HashMap<DispatchId, chrono::DateTime<chrono::Utc>> = HashMap::new();
    loop {
        for o in sim.out() {
            running.entry(o.dispatch.clone()).or_insert_with(|| {
                let n: usize = o.sprint.as_str().parse().unwrap();
                sim.now + chrono::Duration::minutes(g.minutes[&(o.unit.clone(), n)])
            });
        }
        let Some((d, at)) = running
            .iter()
            .min_by_key(|(d, at)| (**at, d.0.clone()))
            .map(|(d, at)| (d.clone(), *at))
        else {
            break;
        };
        running.remove(&d);
        sim.now = at;
        let o = sim.out().into_iter().find(|o| o.dispatch == d).unwrap();
        let key = (o.unit.clone(), o.sprint.as_str().parse::<usize>().unwrap());
        let fail = g.fails_once.contains(&key) && !failed.contains(&key);
        if fail {
            failed.push(key);
        }
        let report = sim.for_order(&o, if fail { failure() } else { success() });
        sim.send(Input::AgentFinished {
            dispatch: d,
            report,
        })
        .unwrap();
    }
    assert_eq!(sim.st().status, OverallStatus::Completed, "{}", g.src);
    let makespan = (sim.now - start).num_minutes();
    // The lower bound, counting each failed attempt as work done.
    let st = sim.st();
    let work_of = |u: usize| -> i64 {
        let name = &st.units[u].name;
        (1..=st.plan.work_units[u].sprints.len())
            .map(|s| {
                let m = g.minutes[&(name.clone(), s)];
                if failed.contains(&(name.clone(), s)) {
                    2 * m
                } else {
                    m
                }
            })
            .sum()
    };
    let mut finish: Vec<i64> = vec![0; st.units.len()];
    for u in 0..st.units.len() {
        // Units are listed after their dependencies in generated plans.
        let ready = st.plan.work_units[u]
            .depends_on
            .iter()
            .map(|d| finish[st.unit_index(d).unwrap()])
            .max()
            .unwrap_or(0);
        finish[u] = ready + work_of(u);
    }
    let critical = finish.iter().copied().max().unwrap_or(0);
    let total: i64 = (0..st.units.len()).map(work_of).sum();
    let bound = critical.max((total as f64 / cap as f64).ceil() as i64);
    (makespan, bound)
}

#[test]
fn makespan_stays_near_the_lower_bound_on_generated_plans() {
    let mut rng = Lcg(0x5c4ed);
    let mut ratios = Vec::new();
    let mut capped = Vec::new();
    for i in 0..300 {
        let g = generate(&mut rng);
        let cap = 1 + (i % 4) as u32;
        let (makespan, bound) = simulate(&g, cap);
        assert!(makespan >= bound, "below the lower bound: {}", g.src);
        ratios.push(makespan as f64 / bound as f64);
        if cap > 1 {
            capped.push(makespan as f64 / bound as f64);
        }
    }
    // With one agent at a time every order meets the bound; the rest is where
    // the order matters.
    eprintln!(
        "with 2–4 agents at a time ({} plans): mean {:.3}",
        capped.len(),
        capped.iter().sum::<f64>() / capped.len() as f64
    );
    ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
    let p95 = ratios[ratios.len() * 95 / 100];
    let worst = ratios[ratios.len() - 1];
    eprintln!(
        "makespan / lower bound over {} plans: mean {mean:.3}, p95 {p95:.3}, worst {worst:.3}",
        ratios.len()
    );
    assert!(mean <= 1.05, "mean makespan {mean:.3} × the lower bound");
}
