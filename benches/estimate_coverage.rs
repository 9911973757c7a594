//! How often the estimate before a start holds what the operation then
//! costs. Twelve repositories, each with its own prices (a factor on what an
//! attempt costs per model, and attempts that vary about it) and its own
//! failure rate, run 30 operations each over plans of varied shapes and
//! complexity, their agents reporting what each attempt cost. Before each
//! operation its estimate is made from the repository's last 20 (as
//! `supervise` makes it); once a repository has ten operations of history,
//! the share of operations whose actual cost falls inside the estimate's
//! range is counted, with how wide the range was and how far "about" was
//! from the actual. Run: `cargo bench --bench estimate_coverage`.

use chrono::{Duration, TimeZone, Utc};
use supervise::engine::estimate::{estimate, CostModel, HISTORY};
use supervise::engine::usage::{Usage, Usd};
use supervise::engine::*;

#[path = "support/ops.rs"]
mod ops;

/// A small deterministic generator (the bench's figures must repeat).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1_000_000.0
    }
}

/// A plan of 1–6 units of 1–4 sprints, some sprints worded to need a
/// stronger model.
fn plan(rng: &mut Rng) -> supervise::plan::Plan {
    let units = 1 + rng.next() as usize % 6;
    let mut text = String::from("# R\n\n| Work Unit | Directory |\n|---|---|\n");
    for u in 0..units {
        text.push_str(&format!("| u{u} | u{u} |\n"));
    }
    for u in 0..units {
        text.push_str(&format!("\n## u{u}\n"));
        for s in 1..=1 + rng.next() % 4 {
            let task = match rng.next() % 3 {
                0 => "Create `a.txt`".to_string(),
                1 => "Improve the security of the auth layer and refactor the schema".to_string(),
                _ => (0..8)
                    .map(|f| format!("Edit `f{f}.rs`"))
                    .collect::<Vec<_>>()
                    .join("\n- "),
            };
            text.push_str(&format!(
                "### Sprint {s}: Step {s}\n- {task}\n- [ ] `make u{u}-{s}` passes\n"
            ));
        }
    }
    supervise::plan::parse(&text, "plan").expect("a plan")
}

/// A repository: what an attempt costs on each model, and how often one fails.
struct World {
    base: [f64; 3],
    fails: f64,
}

/// Whether an attempt on `tier` succeeds, and what it cost.
fn attempt(world: &World, tier: ModelTier, rng: &mut Rng) -> (bool, Usd) {
    let ok = rng.unit() >= world.fails;
    // Attempts vary about the model's cost: 0.5× to 1.8×.
    let dollars = world.base[tier as usize] * (0.5 + 1.3 * rng.unit());
    (ok, Usd::from_dollars(dollars))
}

/// Runs one operation to the end with its agents reporting costs; returns
/// its state.
fn run(
    plan: &supervise::plan::Plan,
    config: EngineConfig,
    world: &World,
    rng: &mut Rng,
    n: u64,
) -> OperationState {
    let mut now = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let mut state: Option<OperationState> = None;
    let mut pending: Vec<DispatchOrder> = Vec::new();
    let feed = |input: Input,
                state: &mut Option<OperationState>,
                pending: &mut Vec<DispatchOrder>,
                now| {
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let Ok(d) = decide_mut(state, input, now) else {
                continue;
            };
            for e in d.effects {
                match e {
                    Effect::Dispatch(o) => pending.push(o),
                    Effect::Integrate { unit, sprint, .. } => {
                        inputs.push(Input::Integrated { unit, sprint })
                    }
                    _ => {}
                }
            }
        }
    };
    feed(
        Input::Start {
            operation: OperationId(format!("op{n}")),
            plan: Box::new(plan.clone()),
            config,
            seed: n,
            workflow: None,
            already_done: Vec::new(),
        },
        &mut state,
        &mut pending,
        now,
    );
    while let Some(o) = pending.pop() {
        now += Duration::seconds(60);
        let (ok, cost) = attempt(world, o.tier, rng);
        let mut report = ops::report(ok);
        // The sprint's own criteria, as a verifier reports them.
        let sprint = plan
            .unit(&o.unit)
            .and_then(|u| u.sprints.iter().find(|s| s.id == o.sprint))
            .expect("the order's sprint");
        let outcome = match ok {
            true => CriterionOutcome::Passed,
            false => CriterionOutcome::Failed,
        };
        report.evidence.criteria = sprint
            .exit_criteria
            .iter()
            .map(|c| CriterionResult {
                line: c.line,
                text: c.text.clone(),
                outcome,
                detail: String::new(),
            })
            .collect();
        let d = o.dispatch;
        report.usage = Some(Usage {
            input_tokens: 1000,
            output_tokens: 200,
            cost: Some(cost),
            ..Default::default()
        });
        feed(
            Input::AgentFinished {
                dispatch: d,
                report,
            },
            &mut state,
            &mut pending,
            now,
        );
    }
    state.expect("started")
}

fn main() {
    let mut rng = Rng(0xe571_a7e5);
    let (mut inside, mut counted) = (0usize, 0usize);
    let (mut below, mut above) = (0usize, 0usize);
    let mut widths = Vec::new();
    let mut errors = Vec::new();
    for _repo in 0..12 {
        let factor = 0.4 + 2.0 * rng.unit();
        let world = World {
            base: [0.08 * factor, 0.5 * factor, 2.4 * factor],
            fails: 0.05 + 0.3 * rng.unit(),
        };
        let mut history: Vec<OperationState> = Vec::new();
        for n in 0..30u64 {
            let from = history.len().saturating_sub(HISTORY);
            let config = EngineConfig {
                cost_model: CostModel::learn(&history[from..]),
                ..Default::default()
            };
            let p = plan(&mut rng);
            let e = estimate(&p, &config).dollars;
            let st = run(&p, config, &world, &mut rng, n);
            let actual = st.dollars_spent();
            if history.len() >= 10 {
                counted += 1;
                if actual < e.low {
                    below += 1;
                } else if actual > e.high {
                    above += 1;
                } else {
                    inside += 1;
                }
                widths.push(e.high.micros() as f64 / e.low.micros().max(1) as f64);
                errors.push(
                    (e.expected.micros() as f64 - actual.micros() as f64).abs()
                        / actual.micros().max(1) as f64,
                );
            }
            history.push(st);
        }
    }
    widths.sort_by(f64::total_cmp);
    errors.sort_by(f64::total_cmp);
    let median = |xs: &[f64]| xs[xs.len() / 2];
    println!(
        "estimate coverage: {inside} of {counted} operations ({:.1} %) cost inside the range ({below} below, {above} above)",
        inside as f64 * 100.0 / counted as f64
    );
    println!(
        "range: high / low, median {:.1}×; 'about' off the actual by a median of {:.0} % (90th percentile {:.0} %)",
        median(&widths),
        median(&errors) * 100.0,
        errors[errors.len() * 9 / 10] * 100.0
    );
}
