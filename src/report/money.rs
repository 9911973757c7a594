//! Where an operation's dollars went, as people read it: per unit, per
//! sprint and per model, against the budget and against the estimate the
//! operation started with, and what one verified criterion cost. Every
//! figure is a sum over [`OperationState::priced_attempts`], the same sum
//! the budget, `spend` and the web view make, so they agree.

use crate::engine::estimate::estimate;
use crate::engine::usage::Usd;
use crate::engine::{ModelTier, OperationState};
use crate::plan::SprintId;
use std::fmt::Write as _;

/// An operation's dollars, broken down.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub total: Usd,
    /// Priced attempts, and paid ones that reported nothing to price.
    pub attempts: usize,
    pub unpriced: usize,
    /// In the plan's order.
    pub by_unit: Vec<(String, Usd)>,
    pub by_sprint: Vec<(String, SprintId, Usd, usize)>,
    /// Haiku, sonnet, opus; only the tiers that cost something.
    pub by_model: Vec<(ModelTier, Usd, usize)>,
}

pub fn breakdown(st: &OperationState) -> Breakdown {
    let mut b = Breakdown::default();
    let mut models = [(Usd::ZERO, 0usize); 3];
    for u in &st.units {
        let mut unit = Usd::ZERO;
        for s in &u.sprints {
            let mut sprint = (Usd::ZERO, 0);
            for h in s.history.iter().filter(|h| h.charged) {
                let Some(usd) = st.attempt_dollars(h) else {
                    b.unpriced += 1;
                    continue;
                };
                sprint = (sprint.0 + usd, sprint.1 + 1);
                let m = &mut models[h.tier as usize];
                *m = (m.0 + usd, m.1 + 1);
            }
            if sprint.1 > 0 {
                unit = unit + sprint.0;
                b.attempts += sprint.1;
                b.by_sprint
                    .push((u.name.clone(), s.id.clone(), sprint.0, sprint.1));
            }
        }
        if unit > Usd::ZERO || b.by_sprint.iter().any(|s| s.0 == u.name) {
            b.by_unit.push((u.name.clone(), unit));
        }
        b.total = b.total + unit;
    }
    b.by_model = ModelTier::ALL
        .iter()
        .zip(models)
        .filter(|(_, (_, n))| *n > 0)
        .map(|(t, (usd, n))| (*t, usd, n))
        .collect();
    b
}

/// Criteria verified: on the final head when it was verified there, else
/// the machine checks of the sprints that completed.
pub fn verified_criteria(st: &OperationState) -> usize {
    match &st.head_verification {
        Some(h) => h.checks.len() - h.failures().count(),
        None => st.completed_criteria().len(),
    }
}

fn listed<T>(items: &[T], shown: impl Fn(&T) -> String) -> String {
    items.iter().map(shown).collect::<Vec<_>>().join(", ")
}

/// Sprints named in a footer, the dearest first; the rest are counted.
const SPRINTS_SHOWN: usize = 8;

/// The status table's footer: one line of spend, or `None` while no
/// attempt has a dollar figure.
pub fn footer(st: &OperationState) -> Option<String> {
    let b = breakdown(st);
    if b.attempts == 0 {
        return None;
    }
    let budget = st.config.budget_usd.map_or_else(String::new, |cap| {
        format!(" of a {cap} budget ({} left)", cap.minus(b.total))
    });
    let mut sprints = b.by_sprint.clone();
    sprints.sort_by_key(|s| std::cmp::Reverse(s.2));
    let more = sprints.len().saturating_sub(SPRINTS_SHOWN);
    sprints.truncate(SPRINTS_SHOWN);
    let mut line = format!(
        "Spend: {}{budget} · by unit: {} · by model: {} · by sprint: {}",
        b.total,
        listed(&b.by_unit, |(u, usd)| format!("{u} {usd}")),
        listed(&b.by_model, |(t, usd, n)| format!(
            "{} {usd} ({})",
            t.as_str(),
            crate::text::count(*n, "attempt")
        )),
        listed(&sprints, |(u, s, usd, _)| format!("{u} {s} {usd}")),
    );
    if more > 0 {
        let _ = write!(line, " and {more} more");
    }
    if b.unpriced > 0 {
        let _ = write!(
            line,
            " · {} reported nothing to price",
            crate::text::count(b.unpriced, "attempt")
        );
    }
    Some(line)
}

/// The final report's account of the money: what was spent against the
/// estimate at start and the budget, what a verified criterion cost, and
/// per unit and model. Empty while no attempt has a dollar figure.
pub fn final_section(st: &OperationState) -> String {
    let b = breakdown(st);
    if b.attempts == 0 {
        return String::new();
    }
    // The estimate is a function of the plan and the settings recorded at
    // start: computed again, it is the one people were given then.
    let e = estimate(&st.plan, &st.config).dollars;
    let against = if b.total < e.low {
        "below it"
    } else if b.total > e.high {
        "above it"
    } else {
        "inside it"
    };
    let mut out = format!(
        "\n### Cost\n- Spent: {} over {} (estimate at start: {}–{}, about {}; {against})\n",
        b.total,
        crate::text::count(b.attempts, "priced attempt"),
        e.low,
        e.high,
        e.expected
    );
    if let Some(cap) = st.config.budget_usd {
        let _ = writeln!(out, "- Budget: {cap} ({} left)", cap.minus(b.total));
    }
    let verified = verified_criteria(st);
    if verified > 0 {
        let _ = writeln!(
            out,
            "- Cost per verified criterion: {} ({verified} {} verified)",
            b.total.split(verified as u64),
            if verified == 1 {
                "criterion"
            } else {
                "criteria"
            }
        );
    }
    let _ = writeln!(
        out,
        "- By unit: {}\n- By model: {}",
        listed(&b.by_unit, |(u, usd)| format!("{u} {usd}")),
        listed(&b.by_model, |(t, usd, n)| format!(
            "{} {usd} ({})",
            t.as_str(),
            crate::text::count(*n, "attempt")
        ))
    );
    if b.unpriced > 0 {
        let _ = writeln!(
            out,
            "- Not in these sums: {} paid for that reported nothing to price",
            crate::text::count(b.unpriced, "attempt")
        );
    }
    out
}

/// The per-sprint table of the COMPLETE file.
pub fn sprint_table(st: &OperationState) -> String {
    let b = breakdown(st);
    if b.attempts == 0 {
        return String::new();
    }
    let mut out =
        String::from("\n| unit | sprint | attempts priced | dollars |\n|---|---|---|---|\n");
    for (u, s, usd, n) in &b.by_sprint {
        let _ = writeln!(out, "| {} | {s} | {n} | {usd} |", super::cell(u));
    }
    let _ = writeln!(out, "| **all** | | {} | **{}** |", b.attempts, b.total);
    out
}
