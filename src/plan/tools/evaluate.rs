//! §17 evaluate, diagnosis: each sprint's atomicity, testability and context
//! fitness against the turn budget, with the fix §17f would make (applied by
//! `rewrite::evaluated`; `analyze` reports this diagnosis only).

use super::measure::{estimated_turns, file_names, is_vague};
use crate::plan::{Plan, Sprint, SprintId};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// §17e's verdict on a sprint's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fitness {
    Oversized,
    RightSized,
    Undersized,
}

impl Fitness {
    pub fn as_str(self) -> &'static str {
        match self {
            Fitness::Oversized => "Oversized",
            Fitness::RightSized => "Right-sized",
            Fitness::Undersized => "Undersized",
        }
    }
}

/// One sprint's checks: each `true` passes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SprintCheck {
    pub unit: String,
    pub sprint: SprintId,
    pub name: String,
    pub line: usize,
    // §17c atomicity
    pub single_concern: bool,
    pub clear_artifact: bool,
    pub bounded_scope: bool,
    pub explicit_io: bool,
    // §17d testability
    pub machine_verifiable: bool,
    pub no_vague_language: bool,
    pub full_coverage: bool,
    // §17e context fitness
    pub estimated_turns: u32,
    pub fitness: Fitness,
    /// What §17f would do about each failed check that `supervise plan
    /// evaluate` rewrites by itself: splits and merges.
    pub fixes: Vec<String>,
    /// What the failed checks ask that no rewrite can make (naming files,
    /// a machine check, plainer words): for a person or an agent.
    pub advice: Vec<String>,
}

impl SprintCheck {
    pub fn atomic(&self) -> bool {
        self.single_concern && self.clear_artifact && self.bounded_scope && self.explicit_io
    }

    pub fn testable(&self) -> bool {
        self.machine_verifiable && self.no_vague_language && self.full_coverage
    }

    /// Every fix and piece of advice, in that order.
    pub fn all_fixes(&self) -> impl Iterator<Item = &String> {
        self.fixes.iter().chain(&self.advice)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Evaluation {
    pub max_turns: u32,
    pub sprints: Vec<SprintCheck>,
}

/// Deliverables that name nothing (§17c "clear artifact").
const VAGUE_DELIVERABLES: &[&str] = &[
    "make it work",
    "update things",
    "various",
    "misc",
    "etc.",
    "and so on",
    "stuff",
];

/// Entry wording that points back without saying at what (§17c "explicit I/O").
const UNSPECIFIC_INPUTS: &[&str] = &["previous work", "prior work", "earlier work", "as before"];

pub fn evaluate(plan: &Plan, max_turns: u32) -> Evaluation {
    let budget = max_turns.max(1);
    let mut sprints = Vec::new();
    for unit in &plan.work_units {
        for (i, s) in unit.sprints.iter().enumerate() {
            sprints.push(check(plan, &unit.name, i == 0, s, budget));
        }
    }
    Evaluation {
        max_turns: budget,
        sprints,
    }
}

fn check(plan: &Plan, unit: &str, first: bool, s: &Sprint, budget: u32) -> SprintCheck {
    let turns = estimated_turns(plan, s);
    let fitness = if turns as f64 > budget as f64 * 0.80 {
        Fitness::Oversized
    } else if (turns as f64) < budget as f64 * 0.15 {
        Fitness::Undersized
    } else {
        Fitness::RightSized
    };
    // One concern: the files the tasks name sit in at most two top-level places.
    let areas: BTreeSet<&str> = s
        .tasks
        .iter()
        .flat_map(|t| file_names(t))
        .filter_map(|f| f.split_once('/').map(|(top, _)| top))
        .collect();
    let single_concern = areas.len() <= 2;
    let all_text = format!("{} {}", s.name, s.tasks.join(" ")).to_lowercase();
    let names_something = s.tasks.iter().any(|t| file_names(t).next().is_some())
        || s.exit_criteria.iter().any(|c| c.is_machine_checkable());
    let clear_artifact =
        names_something && !VAGUE_DELIVERABLES.iter().any(|w| all_text.contains(w));
    let entry_text = s
        .entry_criteria
        .iter()
        .map(|c| c.text.to_lowercase())
        .collect::<Vec<_>>()
        .join(" ");
    let explicit_io = (first || !s.entry_criteria.is_empty())
        && !UNSPECIFIC_INPUTS.iter().any(|w| entry_text.contains(w))
        && !s.exit_criteria.is_empty();
    let machine_verifiable = s.exit_criteria.iter().any(|c| c.is_machine_checkable());
    let no_vague_language = !s.exit_criteria.iter().any(|c| is_vague(&c.text));
    // Coverage: every file a task names is checked by some exit criterion, and
    // a sprint of many tasks has more than one criterion.
    let criteria_text = s
        .exit_criteria
        .iter()
        .map(|c| format!("{} {}", c.text, c.command.as_deref().unwrap_or("")))
        .collect::<Vec<_>>()
        .join(" ");
    let uncovered: Vec<&str> = s
        .tasks
        .iter()
        .flat_map(|t| file_names(t))
        .filter(|f| !criteria_text.contains(f))
        .collect();
    let full_coverage = !s.exit_criteria.is_empty()
        && (uncovered.is_empty() || machine_verifiable && uncovered.len() <= 1)
        && !(s.tasks.len() >= 4 && s.exit_criteria.len() < 2);
    let bounded_scope = fitness != Fitness::Oversized;
    let mut fixes = Vec::new();
    if fitness == Fitness::Oversized {
        fixes.push(format!(
            "split at the halfway point (est. {turns} turns > 80% of {budget})"
        ));
    }
    if fitness == Fitness::Undersized {
        fixes.push(format!(
            "merge into the next sprint (est. {turns} turns < 15% of {budget})"
        ));
    }
    if !single_concern {
        fixes.push(format!(
            "split by concern: the tasks touch {}",
            areas.iter().copied().collect::<Vec<_>>().join(", ")
        ));
    }
    // The rest no rewrite can make: what to write is the plan's authors'.
    let mut advice = Vec::new();
    if !clear_artifact {
        advice.push("name the files or outputs the sprint produces".into());
    }
    if !explicit_io {
        advice.push(if s.exit_criteria.is_empty() {
            "add exit criteria that name verifiable outcomes".into()
        } else {
            "say in the entry criteria which artifacts the sprint starts from".into()
        });
    }
    if !machine_verifiable {
        advice.push(match uncovered.first() {
            Some(f) => format!("add a machine check, e.g. `{f}` exists, or the build/test command"),
            None => "add a machine check: the build or test command that proves it".into(),
        });
    }
    if !no_vague_language {
        advice.push(
            "replace vague wording (\"works correctly\", \"is complete\") with a command or a file check"
                .into(),
        );
    }
    if !full_coverage && !uncovered.is_empty() {
        advice.push(format!(
            "cover the tasks' files in the exit criteria: {}",
            uncovered.join(", ")
        ));
    } else if !full_coverage && !s.exit_criteria.is_empty() {
        advice.push(format!(
            "give its {} tasks more than one exit criterion: one check cannot cover them all",
            s.tasks.len()
        ));
    }
    SprintCheck {
        unit: unit.to_string(),
        sprint: s.id.clone(),
        name: s.name.clone(),
        line: s.line,
        single_concern,
        clear_artifact,
        bounded_scope,
        explicit_io,
        machine_verifiable,
        no_vague_language,
        full_coverage,
        estimated_turns: turns,
        fitness,
        fixes,
        advice,
    }
}

/// The evaluation as people read it: one line per sprint, its fixes below.
pub fn render(ev: &Evaluation) -> String {
    let mut out = format!(
        "Context budget: {} turns per sprint\n\n| Sprint | Atomic | Testable | Est. turns | Size |\n|---|---|---|---|---|\n",
        ev.max_turns
    );
    for c in &ev.sprints {
        let _ = writeln!(
            out,
            "| {} {} (line {}) | {} | {} | {} | {} |",
            c.unit,
            c.sprint,
            c.line,
            if c.atomic() { "✓" } else { "✗" },
            if c.testable() { "✓" } else { "✗" },
            c.estimated_turns,
            c.fitness.as_str()
        );
    }
    list(
        &mut out,
        ev,
        "Fixes (`supervise plan evaluate` makes them where the plan's shape allows; `--dry-run` shows the diff)",
        |c| &c.fixes,
    );
    list(
        &mut out,
        ev,
        "Advice (no rewrite can make these: edit the plan, or have an agent do them with `--agent`)",
        |c| &c.advice,
    );
    out
}

/// One list of the evaluation's (fixes, or advice) under its heading, a
/// line per sprint's item; nothing when it is empty.
fn list(out: &mut String, ev: &Evaluation, heading: &str, of: impl Fn(&SprintCheck) -> &[String]) {
    let listed: Vec<String> = ev
        .sprints
        .iter()
        .flat_map(|c| {
            of(c)
                .iter()
                .map(move |f| format!("- {} Sprint {}: {f}", c.unit, c.sprint))
        })
        .collect();
    if !listed.is_empty() {
        let _ = writeln!(out, "\n{heading}:\n{}", listed.join("\n"));
    }
}

/// Whether `revised` (an agent's fixes to `original`) may replace it: the
/// reader reads it; every unit is still there, and every task of its
/// sprints is in one of the same unit's sprints (two thirds of its words or
/// more: an agent says it in its own words); no command criterion has moved
/// to another unit; and every sprint is testable and within `max_turns`.
/// Each failure says what to do, for the next attempt's prompt.
pub fn accept_fix(original: &Plan, revised: &str, max_turns: u32) -> Result<(), Vec<String>> {
    use super::breakdown::{concern_words, read_agents_plan};
    let plan = read_agents_plan(revised)?;
    let mut problems = Vec::new();
    let commands_of = |u: &crate::plan::WorkUnit| -> BTreeSet<String> {
        u.sprints
            .iter()
            .flat_map(|s| &s.exit_criteria)
            .filter_map(|c| c.command.clone())
            .collect()
    };
    // Each command criterion of the original plan, with the first unit
    // that had it: read once, not once a unit of the revision.
    let mut owner_of: std::collections::HashMap<String, &str> = Default::default();
    let before: std::collections::HashMap<&str, BTreeSet<String>> = original
        .work_units
        .iter()
        .map(|u| (u.name.as_str(), commands_of(u)))
        .collect();
    for u in &original.work_units {
        for cmd in &before[u.name.as_str()] {
            owner_of.entry(cmd.clone()).or_insert(u.name.as_str());
        }
    }
    for unit in &original.work_units {
        let Some(now) = plan.unit(&unit.name) else {
            problems.push(format!(
                "the unit `{}` is gone: keep every unit (fix its sprints instead)",
                unit.name
            ));
            continue;
        };
        let sprint_words: Vec<BTreeSet<String>> = now
            .sprints
            .iter()
            .map(|s| concern_words(&format!("{} {}", s.name, s.tasks.join(" "))))
            .collect();
        for s in &unit.sprints {
            for task in &s.tasks {
                let words = concern_words(task);
                let kept = words.is_empty()
                    || sprint_words
                        .iter()
                        .any(|w| 3 * words.intersection(w).count() >= 2 * words.len());
                if !kept {
                    problems.push(format!(
                        "the task \"{task}\" of {} Sprint {} is in none of {}'s sprints: keep every task",
                        unit.name, s.id, unit.name
                    ));
                }
            }
        }
    }
    let none = BTreeSet::new();
    for unit in &plan.work_units {
        let had = before.get(unit.name.as_str()).unwrap_or(&none);
        for cmd in commands_of(unit).difference(had) {
            if let Some(owner) = owner_of.get(cmd).filter(|o| **o != unit.name) {
                problems.push(format!(
                    "`{cmd}` is {owner}'s check, not {}'s: give {} a check of its own",
                    unit.name, unit.name
                ));
            }
        }
    }
    for c in &evaluate(&plan, max_turns).sprints {
        if !c.machine_verifiable {
            problems.push(format!(
                "{} Sprint {} has no exit criterion a machine can check (a command that passes, a file that exists)",
                c.unit, c.sprint
            ));
        }
        if !c.no_vague_language {
            problems.push(format!(
                "{} Sprint {} still has a vague criterion: say what passes, as a command or a file",
                c.unit, c.sprint
            ));
        }
        if c.fitness == Fitness::Oversized {
            problems.push(format!(
                "{} Sprint {} is over the budget: about {} turns of {} (split it)",
                c.unit, c.sprint, c.estimated_turns, max_turns
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}
