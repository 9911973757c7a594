//! The estimate before a start, as a person reads it: the range, each
//! sprint's first model and its share, and where the budget would stop.

use super::cell;
use crate::engine::estimate::Estimate;
use crate::engine::{EngineConfig, ModelTier};
use std::fmt::Write as _;

/// The estimate in one sentence, for a reply: the range, and where the
/// budget would run out.
pub fn estimate_line(e: &Estimate, config: &EngineConfig) -> String {
    let prices = prices(config);
    let mut out = format!(
        "Expected cost: {}–{} budget units ({prices} a dispatch), from every sprint done by its first attempt to every retry used.",
        e.least, e.most
    );
    out.push_str(&budget_note(e));
    out
}

fn prices(config: &EngineConfig) -> String {
    ModelTier::ALL
        .iter()
        .map(|t| format!("{} {}", t.as_str(), config.cost(*t)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the budget runs out, as a sentence with a leading space; empty
/// when it does not.
fn budget_note(e: &Estimate) -> String {
    match (&e.budget_stops_at, &e.budget_may_stop_at) {
        (Some((u, s)), _) => {
            format!(" The budget runs out at {u} Sprint {s} even if every first attempt succeeds.")
        }
        (None, Some((u, s))) => {
            format!(" The budget may run out at {u} Sprint {s} if attempts fail.")
        }
        (None, None) => String::new(),
    }
}

pub fn estimate_text(title: &str, e: &Estimate, config: &EngineConfig) -> String {
    let prices = prices(config);
    let budget = config
        .budget
        .map_or("no budget".to_string(), |b| format!("the budget: {b}"));
    let mut out = format!(
        "What {title} is likely to cost: {}–{} budget units ({prices} a dispatch; {budget}).\n\n",
        e.least, e.most
    );
    out.push_str(
        "| unit | sprint | first model, and why | first attempt succeeds | every retry used |\n",
    );
    out.push_str("|---|---|---|---|---|\n");
    for s in &e.sprints {
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}) | {} | {} |",
            cell(&s.unit),
            cell(&s.sprint),
            s.first.as_str(),
            cell(&s.why),
            s.least,
            s.most
        );
    }
    let _ = write!(
        out,
        "\nThe least is every sprint done by its first attempt; the most, every sprint using all {} attempts, each on the model a failure leads to.",
        config.max_retries.max(1)
    );
    out.push_str(&budget_note(e));
    out.push_str("\nNothing was started.\n");
    out
}
