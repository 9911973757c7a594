//! What an operation is likely to cost before it starts, in the units its
//! budget counts: each sprint's first attempt on the tier §6a would choose
//! (the least it can cost), and every attempt the retries allow, each on the
//! tier a failure leads to (the most). Where the budget would stop the
//! operation, the sprint is named. Pure: the plan and the settings in.

use super::select::{complexity, select, SelectionContext};
use super::{EngineConfig, ModelTier};
use crate::plan::Plan;

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
}

/// The whole operation's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Estimate {
    pub sprints: Vec<SprintCost>,
    pub least: u64,
    pub most: u64,
    /// The first sprint (in the plan's order) whose cost takes the running
    /// total past the budget even when every first attempt succeeds.
    pub budget_stops_at: Option<(String, String)>,
    /// The same when every attempt is used.
    pub budget_may_stop_at: Option<(String, String)>,
}

pub fn estimate(plan: &Plan, config: &EngineConfig) -> Estimate {
    let graph = plan.graph();
    let mut sprints = Vec::new();
    for (u, unit) in plan.work_units.iter().enumerate() {
        for (s, sprint) in unit.sprints.iter().enumerate() {
            let c = complexity(plan, &graph, u, s);
            let mut previous = None;
            let mut costs = Vec::new();
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
                costs.push(config.cost(tier));
                previous = Some(tier);
            }
            let (first, why) = first.expect("at least one attempt");
            sprints.push(SprintCost {
                unit: unit.name.clone(),
                sprint: sprint.id.to_string(),
                first,
                why,
                least: costs[0],
                most: costs.iter().sum(),
            });
        }
    }
    let crossing = |cost: fn(&SprintCost) -> u64| {
        let budget = config.budget?;
        let mut total = 0;
        sprints.iter().find_map(|s| {
            total += cost(s);
            (total > budget).then(|| (s.unit.clone(), s.sprint.clone()))
        })
    };
    let budget_stops_at = crossing(|s| s.least);
    let budget_may_stop_at = crossing(|s| s.most);
    Estimate {
        least: sprints.iter().map(|s| s.least).sum(),
        most: sprints.iter().map(|s| s.most).sum(),
        budget_stops_at,
        budget_may_stop_at,
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
            // Three attempts, each on the tier a failure leads to: never
            // less than three first attempts, never more than three opus.
            assert!(
                s.most >= 3 * s.least && s.most <= 3 * config.cost(ModelTier::Opus),
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
