//! §16 prioritize, diagnosis: the four scores and the composite priority of
//! each sprint, and the order that runs the highest priority first without
//! breaking a dependency, a unit's own order or a layer. (Rewriting the plan in
//! that order is not built yet; `analyze` reports it.)

use super::measure::{file_names, risk, text_of, Risk, FOUNDATION_WORDS};
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
    let graph = plan.graph();
    for (u, unit) in plan.work_units.iter().enumerate() {
        let dependents = graph.dependent_sprints(&plan.work_units, u);
        for (i, s) in unit.sprints.iter().enumerate() {
            let depth = unit.sprints.len() - i - 1 + dependents;
            let text = text_of(s);
            let foundation = u8::from(depth >= 2 && FOUNDATION_WORDS.found_in(&text));
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
/// every unit of a lower layer), the one of highest priority. Only a unit's
/// next sprint can be ready, so each step looks at one sprint per unit, and
/// counts kept as units finish say which units are free to start.
fn recommend_order(plan: &Plan, ps: &mut [SprintPriority]) {
    let graph = plan.graph();
    let units = &plan.work_units;
    let n = units.len();
    let mut first = Vec::with_capacity(n);
    let mut at = 0;
    for u in units {
        first.push(at);
        at += u.sprints.len();
    }
    let mut next = vec![0usize; n];
    let mut waiting_on: Vec<usize> = graph.deps.iter().map(Vec::len).collect();
    // Units not yet finished per layer (a unit of no sprints is finished).
    let mut open_in_layer: std::collections::BTreeMap<u32, usize> = Default::default();
    for u in units.iter().filter(|u| !u.sprints.is_empty()) {
        *open_in_layer.entry(u.layer).or_default() += 1;
    }
    for u in (0..n).filter(|&u| units[u].sprints.is_empty()) {
        for &v in &graph.dependents[u] {
            waiting_on[v] -= 1;
        }
    }
    let mut place = 1;
    loop {
        let lowest_open = open_in_layer.iter().find(|(_, c)| **c > 0).map(|(l, _)| *l);
        let best = (0..n)
            .filter(|&u| next[u] < units[u].sprints.len())
            .filter(|&u| waiting_on[u] == 0 && lowest_open.is_none_or(|l| units[u].layer <= l))
            .max_by(|&a, &b| {
                let (pa, pb) = (&ps[first[a] + next[a]], &ps[first[b] + next[b]]);
                pa.priority
                    .partial_cmp(&pb.priority)
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(b.cmp(&a))
            });
        let Some(u) = best else { break };
        ps[first[u] + next[u]].recommended = place;
        place += 1;
        next[u] += 1;
        if next[u] == units[u].sprints.len() {
            if let Some(c) = open_in_layer.get_mut(&units[u].layer) {
                *c -= 1;
            }
            for &v in &graph.dependents[u] {
                waiting_on[v] -= 1;
            }
        }
    }
    // Unreachable for a plan the reader accepted (no cycles): whatever is
    // left keeps plan order.
    for p in ps.iter_mut().filter(|p| p.recommended == 0) {
        p.recommended = place;
        place += 1;
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
        "\nSprints the recommended order moves: {moved} (each unit keeps its order; across units the supervisor runs the longest remaining path first)"
    );
    out
}
