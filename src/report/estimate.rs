//! The estimate before a start, as a person reads it: the range, each
//! sprint's first model and its share, and where the budget would stop.

use super::cell;
use crate::engine::estimate::Estimate;
use crate::engine::{EngineConfig, ModelTier};
use std::fmt::Write as _;

/// The estimate in one sentence, for a reply: the dollar range, the range
/// in budget units, and where a budget would run out.
pub fn estimate_line(e: &Estimate, config: &EngineConfig) -> String {
    let d = &e.dollars;
    let mut out = format!(
        "Expected cost: {}–{} (about {}; at most {} if every retry and continuation is used), {}; {}–{} budget units ({} a dispatch).",
        d.low,
        d.high,
        d.expected,
        d.ceiling,
        learned(e),
        e.least,
        e.most,
        prices(config)
    );
    out.push_str(&budget_note(e));
    out
}

/// Where the dollars come from, as a clause.
fn learned(e: &Estimate) -> String {
    match e.learned_from {
        0 => "priced at the default cost of an attempt (this repository has no history yet)"
            .to_string(),
        n => format!("priced from what attempts cost in this repository's last {n} operation(s)"),
    }
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
    let mut budgets = Vec::new();
    if let Some(b) = config.budget_usd {
        budgets.push(format!("the budget: {b}"));
    }
    if let Some(b) = config.budget {
        budgets.push(format!("the budget: {b} units"));
    }
    let budget = match budgets.is_empty() {
        true => "No budget".to_string(),
        false => crate::text::sentence(&budgets.join(", ")),
    };
    let d = &e.dollars;
    let mut out = format!(
        "What {title} is likely to cost: {}–{} (about {}; at most {} if every retry and continuation is used), {}.\nIn budget units: {}–{} ({prices} a dispatch). {budget}.\n\n",
        d.low, d.high, d.expected, d.ceiling, learned(e), e.least, e.most
    );
    out.push_str(
        "| unit | sprint | first model, and why | dollars (about) | units: first attempt succeeds | units: every retry and continuation used |\n",
    );
    out.push_str("|---|---|---|---|---|---|\n");
    for s in &e.sprints {
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}) | {}–{} ({}) | {} | {} |",
            cell(&s.unit),
            cell(&s.sprint),
            s.first.as_str(),
            cell(&s.why),
            s.dollars.low,
            s.dollars.high,
            s.dollars.expected,
            s.least,
            s.most
        );
    }
    let m = &config.cost_model;
    let _ = write!(
        out,
        "\nThe low end is every sprint done by one attempt at the cheap end of what attempts cost; the high end, the attempts nine sprints in ten take ({:.1}), each on the model a failure leads to, at the dear end; a sprint takes {:.1} attempts on the mean. Units: the least is every first attempt succeeding, the most all {} attempts used.",
        m.attempts_high_x100 as f64 / 100.0,
        m.attempts_mean_x100 as f64 / 100.0,
        config.max_retries.max(1)
    );
    out.push_str(&budget_note(e));
    out.push_str("\nNothing was started.\n");
    out
}
