//! §16 prioritize, diagnosis: the four scores and the composite priority of
//! each sprint, and the order that runs the highest priority first without
//! breaking a dependency, a unit's own order or a layer. (Rewriting the plan in
//! that order is not built yet; `analyze` reports it.)

use super::measure::{file_names, risk, text_of, Risk, FOUNDATION};
use crate::plan::{CriterionKind, Plan, SprintId};
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SprintPriority {
    pub unit: String,
    pub sprint: SprintId,
    pub name: String,
    /// Sprints transitively blocked by this one (later sprints of its unit and
    /// every sprint of the units that depend on it).
    pub dependency_depth: usize,
    pub foundation: u8,
    pub risk: u8,
    pub complexity: f64,
    pub priority: f64,
    /// The dominant factor, as §16e's annotation says it.
    pub justification: String,
    /// 1-based place in plan order and in the recommended order.
    pub position: usize,
    pub recommended: usize,
}

/// §16b–§16d for every sprint, in plan order.
pub fn prioritize(plan: &Plan) -> Vec<SprintPriority> {
    let mut out = Vec::new();
    for unit in &plan.work_units {
        let dependents: usize = plan
            .dependents_of(&unit.name)
            .iter()
            .filter_map(|n| plan.unit(n))
            .map(|d| d.sprints.len())
            .sum();
        for (i, s) in unit.sprints.iter().enumerate() {
            let depth = unit.sprints.len() - i - 1 + dependents;
            let text = text_of(s);
            let foundation = u8::from(FOUNDATION.iter().any(|w| text.contains(w)) && depth >= 2);
            let risk = match risk(&text) {
                Risk::ExternalApi | Risk::NewTechnology => 3,
                Risk::Algorithm | Risk::SystemIo => 2,
                Risk::Simple => 1,
            };
            let tasks = match s.tasks.len() {
                0..=3 => 1.0,
                4..=5 => 2.0,
                6..=7 => 3.0,
                _ => 4.0,
            };
            let files = match s.tasks.iter().flat_map(|t| file_names(t)).count() {
                0..=2 => 1.0,
                3..=5 => 2.0,
                6..=10 => 3.0,
                _ => 4.0,
            };
            let commands: Vec<&str> = s
                .exit_criteria
                .iter()
                .filter(|c| c.kind == CriterionKind::Command)
                .filter_map(|c| c.command.as_deref())
                .collect();
            let verification = if commands.iter().any(|c| c.contains("integration")) {
                4.0
            } else if commands.iter().any(|c| c.contains("test")) {
                3.0
            } else if !commands.is_empty() {
                2.0
            } else {
                1.0
            };
            let complexity = (tasks + files + verification) / 3.0;
            let priority =
                depth as f64 * 3.0 + foundation as f64 * 2.0 + risk as f64 + complexity * 0.5;
            let mut reasons = Vec::new();
            if depth > 0 {
                reasons.push(format!(
                    "blocks {depth} downstream sprint{}",
                    if depth == 1 { "" } else { "s" }
                ));
            } else {
                reasons.push("leaf sprint, no dependents".into());
            }
            if foundation == 1 {
                reasons.push("establishes what later sprints build on".into());
            }
            if risk == 3 {
                reasons.push("high risk".into());
            }
            out.push(SprintPriority {
                unit: unit.name.clone(),
                sprint: s.id.clone(),
                name: s.name.clone(),
                dependency_depth: depth,
                foundation,
                risk,
                complexity: (complexity * 10.0).round() / 10.0,
                priority: (priority * 10.0).round() / 10.0,
                justification: format!("{:.1} — {}", priority, reasons.join(", ")),
                position: out.len() + 1,
                recommended: 0,
            });
        }
    }
    recommend_order(plan, &mut out);
    out
}

/// §16d: repeatedly take, among the sprints whose predecessors are all taken
/// (the sprint before it in its unit, every sprint of the units it depends on,
/// every unit of a lower layer), the one of highest priority.
fn recommend_order(plan: &Plan, ps: &mut [SprintPriority]) {
    let n = ps.len();
    let unit_of: Vec<usize> = plan
        .work_units
        .iter()
        .enumerate()
        .flat_map(|(u, unit)| std::iter::repeat_n(u, unit.sprints.len()))
        .collect();
    let mut taken = vec![false; n];
    let mut next = 1;
    let unit_done = |u: usize, taken: &[bool]| (0..n).all(|i| unit_of[i] != u || taken[i]);
    while next <= n {
        let ready = (0..n).filter(|&i| !taken[i]).filter(|&i| {
            let u = unit_of[i];
            let unit = &plan.work_units[u];
            let in_order = i == 0 || unit_of[i - 1] != u || taken[i - 1];
            let deps = unit.depends_on.iter().all(|d| {
                plan.work_units
                    .iter()
                    .position(|x| &x.name == d)
                    .is_none_or(|du| unit_done(du, &taken))
            });
            let layers = plan
                .work_units
                .iter()
                .enumerate()
                .all(|(v, x)| x.layer >= unit.layer || unit_done(v, &taken));
            in_order && deps && layers
        });
        let Some(best) = ready.max_by(|&a, &b| {
            ps[a]
                .priority
                .partial_cmp(&ps[b].priority)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then(b.cmp(&a))
        }) else {
            // Unreachable for a plan the reader accepted (no cycles): keep
            // plan order for whatever is left.
            for (i, p) in ps.iter_mut().enumerate() {
                if !taken[i] {
                    p.recommended = next;
                    next += 1;
                }
            }
            return;
        };
        taken[best] = true;
        ps[best].recommended = next;
        next += 1;
    }
}

/// The priorities as people read them, with the recommended place of each.
pub fn render(ps: &[SprintPriority]) -> String {
    let mut out = String::from(
        "| Sprint | Name | Priority | Position | Recommended |\n|---|---|---|---|---|\n",
    );
    for p in ps {
        let _ = writeln!(
            out,
            "| {} {} | {} | {} | {} | {} |",
            p.unit, p.sprint, p.name, p.justification, p.position, p.recommended
        );
    }
    let moved = ps.iter().filter(|p| p.position != p.recommended).count();
    let _ = writeln!(
        out,
        "\nSprints the recommended order moves: {moved} (not applied: rewriting the plan is not available yet)"
    );
    out
}
