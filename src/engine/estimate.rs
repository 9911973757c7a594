//! What an operation is likely to cost before it starts: in the units its
//! relative budget counts — each sprint's first attempt on the tier §6a
//! would choose (the least it can cost), and every attempt the retries
//! allow, each on the tier a failure leads to (the most) — and in dollars,
//! priced from what attempts cost in this repository before (its
//! [`CostModel`]). Where a budget would stop the operation, the sprint is
//! named. Pure: the plan and the settings in.

use super::select::{complexity, select, SelectionContext};
use super::usage::Usd;
use super::{EngineConfig, ModelTier, OperationState, DEFAULT_ATTEMPT_USD};
use crate::plan::Plan;
use serde::{Deserialize, Serialize};

/// What one attempt on a tier costs: its 10th percentile, mean and 90th
/// percentile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptCost {
    pub low: Usd,
    pub mean: Usd,
    pub high: Usd,
}

impl AttemptCost {
    fn around(mean: Usd) -> AttemptCost {
        AttemptCost {
            low: mean.split(2),
            mean,
            high: mean.times(2),
        }
    }
}

/// What attempts cost in a repository, and how many a sprint takes: learned
/// from its past operations ([`CostModel::learn`]), else documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostModel {
    /// Per tier: haiku, sonnet, opus.
    pub attempt: [AttemptCost; 3],
    /// Paid attempts a completed sprint took (retries and continuations
    /// counted), in hundredths: the mean and the 90th percentile.
    pub attempts_mean_x100: u32,
    pub attempts_high_x100: u32,
    /// Past operations it was learned from (none: too few attempts in
    /// them, or none at all, so the defaults).
    pub operations: u32,
}

impl Default for CostModel {
    fn default() -> CostModel {
        CostModel {
            attempt: DEFAULT_ATTEMPT_USD.map(AttemptCost::around),
            attempts_mean_x100: 150,
            attempts_high_x100: 250,
            operations: 0,
        }
    }
}

/// Past operations an estimate is learned from: the latest, as a
/// repository's work and the models' prices change.
pub const HISTORY: usize = 20;

/// Fewer priced attempts than this on a tier, or completed sprints in all,
/// and the defaults stand for them: two or three figures are no spread.
const ENOUGH: usize = 5;

fn percentile(sorted: &[u64], p: usize) -> u64 {
    sorted[(sorted.len() - 1) * p / 100]
}

impl CostModel {
    /// Every attempt costs `each`, and every sprint takes one (for tests).
    pub fn flat(each: Usd) -> CostModel {
        CostModel {
            attempt: [AttemptCost {
                low: each,
                mean: each,
                high: each,
            }; 3],
            attempts_mean_x100: 100,
            attempts_high_x100: 100,
            operations: 0,
        }
    }

    /// Learned from past operations' priced attempts and completed sprints.
    /// A tier with too few attempts is priced from the others, at the
    /// defaults' ratio between tiers.
    pub fn learn<'a>(past: impl IntoIterator<Item = &'a OperationState>) -> CostModel {
        let d = CostModel::default();
        let mut per_tier: [Vec<u64>; 3] = Default::default();
        let mut attempts: Vec<u64> = Vec::new();
        let mut operations = 0;
        for st in past {
            operations += 1;
            for (_, _, tier, _, usd) in st.priced_attempts() {
                per_tier[tier as usize].push(usd.micros());
            }
            for s in st.units.iter().flat_map(|u| &u.sprints) {
                if s.completion
                    .as_ref()
                    .is_some_and(|c| c.already_done.is_none())
                {
                    attempts.push(s.history.iter().filter(|h| h.charged).count() as u64);
                }
            }
        }
        let learned: [Option<AttemptCost>; 3] = per_tier.map(|mut xs| {
            (xs.len() >= ENOUGH).then(|| {
                xs.sort_unstable();
                AttemptCost {
                    low: Usd::from_micros(percentile(&xs, 10)),
                    mean: Usd::from_micros(xs.iter().sum::<u64>() / xs.len() as u64),
                    high: Usd::from_micros(percentile(&xs, 90)),
                }
            })
        });
        // The tiers learned, as a share of what the defaults expected of them.
        let known: Vec<(u64, u64)> = (0..3)
            .filter_map(|t| Some((learned[t]?.mean.micros(), d.attempt[t].mean.micros())))
            .collect();
        let attempt = std::array::from_fn(|t| match learned[t] {
            Some(c) => c,
            None if !known.is_empty() => {
                let (got, expected) = known
                    .iter()
                    .fold((0u64, 0u64), |(a, b), (g, e)| (a + g, b + e));
                let scale = |u: Usd| {
                    Usd::from_micros(
                        (u.micros() as u128 * got as u128 / expected.max(1) as u128) as u64,
                    )
                };
                let c = d.attempt[t];
                AttemptCost {
                    low: scale(c.low),
                    mean: scale(c.mean),
                    high: scale(c.high),
                }
            }
            None => d.attempt[t],
        });
        let (mean, high) = match attempts.len() >= ENOUGH {
            true => {
                attempts.sort_unstable();
                let sum: u64 = attempts.iter().sum();
                (
                    (sum * 100 / attempts.len() as u64) as u32,
                    (percentile(&attempts, 90) * 100) as u32,
                )
            }
            false => (d.attempts_mean_x100, d.attempts_high_x100),
        };
        let learned_any = learned.iter().any(Option::is_some) || attempts.len() >= ENOUGH;
        CostModel {
            attempt,
            attempts_mean_x100: mean.max(100),
            attempts_high_x100: high.max(mean).max(100),
            // Too little to learn from: the defaults, and said so.
            operations: if learned_any { operations } else { 0 },
        }
    }

    /// `attempts_x100` hundredths of attempts along `tiers` (the tier of
    /// each attempt in turn; past the last, the last again), each at `at`.
    fn over(&self, tiers: &[ModelTier], attempts_x100: u32, at: fn(&AttemptCost) -> Usd) -> Usd {
        let mut left = attempts_x100 as u64;
        let mut total = Usd::ZERO;
        let mut i = 0;
        while left > 0 {
            let tier = tiers
                .get(i)
                .or(tiers.last())
                .copied()
                .unwrap_or(ModelTier::Sonnet);
            let share = left.min(100);
            total = total + at(&self.attempt[tier as usize]).times(share).split(100);
            left -= share;
            i += 1;
        }
        total
    }
}

/// A sprint's or an operation's dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dollars {
    /// One attempt, at the low end of what attempts cost.
    pub low: Usd,
    /// The attempts a sprint takes on the mean, at the mean.
    pub expected: Usd,
    /// The attempts the 90th percentile of sprints takes, at the high end:
    /// the range people are told is `low`–`high`.
    pub high: Usd,
    /// Every attempt the retries allow, at the high end: what the operation
    /// cannot pass without a budget saying no first.
    pub ceiling: Usd,
}

impl std::ops::Add for Dollars {
    type Output = Dollars;
    fn add(self, o: Dollars) -> Dollars {
        Dollars {
            low: self.low + o.low,
            expected: self.expected + o.expected,
            high: self.high + o.high,
            ceiling: self.ceiling + o.ceiling,
        }
    }
}

/// One sprint's share of the estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SprintCost {
    pub unit: String,
    pub sprint: String,
    /// The tier of its first attempt, and why.
    pub first: ModelTier,
    pub why: String,
    /// Its first attempt succeeds.
    pub least: u64,
    /// Every attempt the retries allow is used.
    pub most: u64,
    pub dollars: Dollars,
}

/// The whole operation's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    pub sprints: Vec<SprintCost>,
    pub least: u64,
    pub most: u64,
    pub dollars: Dollars,
    /// The first sprint (in the plan's order) whose cost takes the running
    /// total past the budget even when every first attempt succeeds (in
    /// dollars: at the low end).
    pub budget_stops_at: Option<(String, String)>,
    /// The same when every attempt is used (in dollars: at the high end).
    pub budget_may_stop_at: Option<(String, String)>,
    /// What the estimate's dollars were learned from: past operations.
    pub learned_from: u32,
}

pub fn estimate(plan: &Plan, config: &EngineConfig) -> Estimate {
    let graph = plan.graph();
    let model = &config.cost_model;
    let mut sprints = Vec::new();
    for (u, unit) in plan.work_units.iter().enumerate() {
        for (s, sprint) in unit.sprints.iter().enumerate() {
            let c = complexity(plan, &graph, u, s);
            let mut previous = None;
            let mut tiers = Vec::new();
            let mut first = None;
            for failures in 0..config.max_retries.max(1) {
                let ctx = SelectionContext {
                    failures,
                    partial: false,
                    previous,
                    round: None,
                };
                let (tier, why) = select(&c, ctx);
                first.get_or_insert((tier, why));
                tiers.push(tier);
                previous = Some(tier);
            }
            let (first, why) = first.expect("at least one attempt");
            // The most is every attempt with every continuation it may
            // take, each on the tier a continuation keeps (at least sonnet).
            let every: Vec<ModelTier> = tiers
                .iter()
                .flat_map(|&t| {
                    std::iter::once(t).chain(std::iter::repeat_n(
                        t.max(ModelTier::Sonnet),
                        config.max_continuations as usize,
                    ))
                })
                .collect();
            let all = tiers.len() as u32 * 100;
            let dollars = Dollars {
                low: model.over(&tiers, 100, |a| a.low),
                expected: model.over(&tiers, model.attempts_mean_x100.min(all), |a| a.mean),
                high: model.over(&tiers, model.attempts_high_x100.min(all), |a| a.high),
                ceiling: model.over(&every, every.len() as u32 * 100, |a| a.high),
            };
            sprints.push(SprintCost {
                unit: unit.name.clone(),
                sprint: sprint.id.to_string(),
                first,
                why,
                least: config.cost(tiers[0]),
                most: every.iter().map(|t| config.cost(*t)).sum(),
                dollars,
            });
        }
    }
    // The first sprint at which the running total passes a cap.
    fn crossing<T: Copy + PartialOrd + std::ops::Add<Output = T>>(
        sprints: &[SprintCost],
        cap: Option<T>,
        zero: T,
        cost: impl Fn(&SprintCost) -> T,
    ) -> Option<(String, String)> {
        let cap = cap?;
        let mut total = zero;
        sprints.iter().find_map(|s| {
            total = total + cost(s);
            (total > cap).then(|| (s.unit.clone(), s.sprint.clone()))
        })
    }
    let first_of = |a: Option<(String, String)>, b: Option<(String, String)>| {
        let at = |x: &Option<(String, String)>| {
            x.as_ref()
                .and_then(|(u, s)| sprints.iter().position(|c| &c.unit == u && &c.sprint == s))
        };
        match (at(&a), at(&b)) {
            (Some(i), Some(j)) if j < i => b,
            (None, _) => b,
            _ => a,
        }
    };
    let budget_stops_at = first_of(
        crossing(&sprints, config.budget, 0, |s| s.least),
        crossing(&sprints, config.budget_usd, Usd::ZERO, |s| s.dollars.low),
    );
    let budget_may_stop_at = first_of(
        crossing(&sprints, config.budget, 0, |s| s.most),
        crossing(&sprints, config.budget_usd, Usd::ZERO, |s| s.dollars.high),
    );
    Estimate {
        least: sprints.iter().map(|s| s.least).sum(),
        most: sprints.iter().map(|s| s.most).sum(),
        dollars: sprints
            .iter()
            .map(|s| s.dollars)
            .fold(Dollars::default(), |a, b| a + b),
        budget_stops_at,
        budget_may_stop_at,
        learned_from: model.operations,
        sprints,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plan(text: &str) -> Plan {
        crate::plan::parse(text, "plan").expect("a plan")
    }

    #[test]
    fn the_range_runs_from_every_first_attempt_to_every_retry() {
        let p = plan(
            "# Shop\n\n| Work Unit | Directory |\n|---|---|\n| api | api |\n\n\
             ## api\n### Sprint 1: Add a route\n- [ ] `api/route.txt` exists\n\
             ### Sprint 2: Test it\n- [ ] `api/test.txt` exists\n",
        );
        let config = EngineConfig::default();
        let e = estimate(&p, &config);
        assert_eq!(e.sprints.len(), 2);
        for s in &e.sprints {
            assert_eq!(s.least, config.cost(s.first), "{s:?}");
            // Three attempts, each on the tier a failure leads to, each
            // with its continuations: never less than three first attempts
            // and their continuations, never more than all of them on opus.
            let dispatches = 3 * (1 + config.max_continuations as u64);
            assert!(
                s.most >= dispatches * s.least
                    && s.most <= dispatches * config.cost(ModelTier::Opus),
                "{s:?}"
            );
        }
        assert_eq!(e.least, e.sprints.iter().map(|s| s.least).sum::<u64>());
        assert_eq!(e.most, e.sprints.iter().map(|s| s.most).sum::<u64>());
        assert_eq!((e.budget_stops_at, e.budget_may_stop_at), (None, None));
    }

    #[test]
    fn the_sprint_a_budget_would_stop_at_is_named() {
        let p = plan(
            "# Shop\n\n| Work Unit | Directory |\n|---|---|\n| api | api |\n\n\
             ## api\n### Sprint 1: Add a route\n- [ ] `api/route.txt` exists\n\
             ### Sprint 2: Test it\n- [ ] `api/test.txt` exists\n",
        );
        let mut config = EngineConfig::default();
        let e = estimate(&p, &config);
        config.budget = Some(e.sprints[0].least);
        let capped = estimate(&p, &config);
        assert_eq!(capped.budget_stops_at, Some(("api".into(), "2".into())));
        assert_eq!(capped.budget_may_stop_at, Some(("api".into(), "1".into())));
    }

    /// A plan of `sprints[i]` sprints in unit i, each with a task of words
    /// that push its complexity up or not.
    fn random_plan(sprints: &[usize], words: &[u8]) -> Plan {
        let mut text = String::from("# R\n\n| Work Unit | Directory |\n|---|---|\n");
        for i in 0..sprints.len() {
            text.push_str(&format!("| u{i} | u{i} |\n"));
        }
        for (i, n) in sprints.iter().enumerate() {
            text.push_str(&format!("\n## u{i}\n"));
            for s in 1..=*n {
                let task = match words[(i + s) % words.len()] % 3 {
                    0 => "Create `a.txt`".to_string(),
                    1 => {
                        "Improve the security of the auth layer and refactor the schema".to_string()
                    }
                    _ => (0..8)
                        .map(|f| format!("Edit `f{f}.rs`"))
                        .collect::<Vec<_>>()
                        .join("\n- "),
                };
                text.push_str(&format!(
                    "### Sprint {s}: Step {s}\n- {task}\n- [ ] `u{i}/{s}.txt` exists\n"
                ));
            }
        }
        crate::plan::parse(&text, "plan").expect("a plan")
    }

    proptest! {
        /// However the plan and the settings, the least is the sum of first
        /// attempts and at most the most; more retries never make the most
        /// smaller; and the budget stops the operation no later when every
        /// retry is used than when every first attempt succeeds.
        #[test]
        fn the_estimate_is_a_consistent_range(
            sprints in proptest::collection::vec(1usize..4, 1..6),
            words in proptest::collection::vec(any::<u8>(), 1..8),
            retries in 1u32..5,
            budget in proptest::option::of(0u64..200),
        ) {
            let p = random_plan(&sprints, &words);
            let mut config = EngineConfig { max_retries: retries, budget, ..EngineConfig::default() };
            let e = estimate(&p, &config);
            prop_assert_eq!(e.sprints.len(), sprints.iter().sum::<usize>());
            prop_assert!(e.least <= e.most);
            prop_assert_eq!(e.least, e.sprints.iter().map(|s| config.cost(s.first)).sum::<u64>());
            let position = |at: &Option<(String, String)>| {
                at.as_ref().map(|(u, s)| e.sprints.iter().position(|x| &x.unit == u && &x.sprint == s))
            };
            match (position(&e.budget_stops_at), position(&e.budget_may_stop_at)) {
                (Some(certain), Some(may)) => prop_assert!(may <= certain),
                (Some(_), None) => prop_assert!(false, "stops for sure but not when retries are used"),
                (None, _) => prop_assert!(budget.is_none_or(|b| e.least <= b)),
            }
            config.max_retries = retries + 1;
            prop_assert!(estimate(&p, &config).most >= e.most);
        }
    }
}
