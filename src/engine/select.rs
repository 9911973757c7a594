//! §6a model selection: the complexity score from its five dimensions, the tier
//! thresholds, and the overrides. Every choice comes with its reason.

use super::events::ModelTier;
use crate::plan::{Criterion, CriterionKind, Plan, Sprint, SprintType};

/// A scored sprint: the total, each dimension, and the facts the overrides need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Complexity {
    pub score: i32,
    pub estimated_turns: u32,
    pub parts: Vec<(&'static str, i32)>,
    pub vague_criteria: bool,
    pub foundation: bool,
    /// Sprints that (transitively) wait for this one.
    pub dependents: usize,
    pub open_questions: bool,
}

const VAGUE: &[&str] = &[
    "works correctly",
    "properly handles",
    "is complete",
    "works well",
    "looks good",
    "as expected",
    "works fine",
    "is done",
];
const OPEN_ENDED: &[&str] = &[
    "improve", "optimize", "optimise", "enhance", "clean up", "polish", "refine",
];
const OPEN_QUESTIONS: &[&str] = &[
    "tbd",
    "to be decided",
    "decide later",
    "determine later",
    "clarify",
    "open question",
    "???",
];
const FOUNDATION: &[&str] = &[
    "types",
    "interface",
    "foundation",
    "core",
    "schema",
    "model",
    "protocol",
    "scaffold",
    "skeleton",
    "base ",
];

fn text_of(s: &Sprint) -> String {
    let mut t = s.name.to_lowercase();
    for x in s.tasks.iter().chain(s.notes.iter()) {
        t.push(' ');
        t.push_str(&x.to_lowercase());
    }
    t
}

/// Path-like tokens in backticks: the files a task names.
fn named_files(text: &str) -> usize {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| !c.contains(' ') && c.contains('.') && !c.ends_with('.'))
        .count()
}

/// §17e: `R + 2C + 2M + B + ceil(L/75) + V + 5`.
pub fn estimated_turns(plan: &Plan, s: &Sprint) -> u32 {
    let mut create = 0u32;
    let mut modify = 0u32;
    for t in &s.tasks {
        let n = named_files(t).max(1) as u32;
        let lt = t.to_lowercase();
        if ["create", "write", "add", "new "]
            .iter()
            .any(|w| lt.contains(w))
        {
            create += n;
        } else {
            modify += n;
        }
    }
    let read = 1
        + plan.referenced_files.iter().filter(|f| f.exists).count() as u32
        + s.entry_criteria.len() as u32;
    let builds = s
        .exit_criteria
        .iter()
        .filter(|c| c.command.as_deref().is_some_and(|c| c.contains("build")))
        .count() as u32;
    let lines = create * 60 + modify * 25;
    read + 2 * create + 2 * modify + builds + lines.div_ceil(75) + s.exit_criteria.len() as u32 + 5
}

fn is_vague(c: &Criterion) -> bool {
    let t = c.text.to_lowercase();
    VAGUE.iter().any(|v| t.contains(v))
}

pub fn complexity(plan: &Plan, unit: usize, sprint: usize) -> Complexity {
    let u = &plan.work_units[unit];
    let s = &u.sprints[sprint];
    let text = text_of(s);
    let mut parts = Vec::new();

    let turns = estimated_turns(plan, s);
    parts.push((
        "turns",
        match turns {
            0..=9 => 1,
            10..=20 => 3,
            21..=35 => 5,
            36..=50 => 8,
            _ => 10,
        },
    ));
    let files: usize = s.tasks.iter().map(|t| named_files(t)).sum();
    parts.push((
        "files",
        match files {
            0..=2 => 0,
            3..=5 => 2,
            6..=10 => 4,
            _ => 6,
        },
    ));

    let machine = s
        .exit_criteria
        .iter()
        .filter(|c| c.kind != CriterionKind::Checklist)
        .count();
    let vague_criteria = s.exit_criteria.is_empty() || s.exit_criteria.iter().any(is_vague);
    parts.push((
        "criteria",
        if vague_criteria {
            5
        } else if machine == s.exit_criteria.len() {
            0
        } else {
            2
        },
    ));
    parts.push((
        "clarity",
        if OPEN_ENDED.iter().any(|w| text.contains(w)) {
            5
        } else if files > 0 {
            0
        } else {
            3
        },
    ));

    let later_in_unit = u.sprints.len() - sprint - 1;
    let dependents = later_in_unit
        + plan
            .dependents_of(&u.name)
            .iter()
            .filter_map(|n| plan.unit(n))
            .map(|d| d.sprints.len())
            .sum::<usize>();
    let foundation = FOUNDATION.iter().any(|w| text.contains(w)) && dependents >= 2;
    parts.push(("foundation", if foundation { 5 } else { 0 }));
    parts.push((
        "dependents",
        match dependents {
            0..=1 => 0,
            2..=5 => 2,
            _ => 5,
        },
    ));
    let risk = if [
        "api",
        "http",
        "integration",
        "oauth",
        "network",
        "webhook",
        "third-party",
        "external",
    ]
    .iter()
    .any(|w| text.contains(w))
    {
        5
    } else if [
        "new technology",
        "unfamiliar",
        "experimental",
        "migrate to",
        "prototype",
    ]
    .iter()
    .any(|w| text.contains(w))
    {
        4
    } else if [
        "algorithm",
        "parser",
        "concurren",
        "optimi",
        "cache",
        "scheduler",
        "solver",
    ]
    .iter()
    .any(|w| text.contains(w))
    {
        3
    } else if [
        "file",
        "i/o",
        "process",
        "system call",
        "filesystem",
        "disk",
        "socket",
    ]
    .iter()
    .any(|w| text.contains(w))
    {
        2
    } else {
        1
    };
    parts.push(("risk", risk));
    parts.push((
        "type",
        match s.kind {
            SprintType::Code => 0,
            SprintType::Command | SprintType::Background => -3,
            SprintType::Deferred => -2,
            SprintType::Manual => -1,
        },
    ));
    let score = parts.iter().map(|(_, p)| p).sum();
    let all_text = format!(
        "{text} {}",
        s.exit_criteria
            .iter()
            .map(|c| c.text.to_lowercase())
            .collect::<Vec<_>>()
            .join(" ")
    );
    Complexity {
        score,
        estimated_turns: turns,
        parts,
        vague_criteria,
        foundation,
        dependents,
        open_questions: OPEN_QUESTIONS.iter().any(|w| all_text.contains(w)),
    }
}

/// What a dispatch is about to be, for the overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectionContext {
    pub failures: u32,
    pub partial: bool,
    pub previous: Option<ModelTier>,
}

/// The tier for a score, then every override of §6a, with the reason.
pub fn select(c: &Complexity, ctx: SelectionContext) -> (ModelTier, String) {
    let base = match c.score {
        i32::MIN..=5 => ModelTier::Haiku,
        6..=12 => ModelTier::Sonnet,
        _ => ModelTier::Opus,
    };
    let mut reasons = vec![format!(
        "complexity score {} ({})",
        c.score,
        c.parts
            .iter()
            .filter(|(_, p)| *p != 0)
            .map(|(n, p)| format!("{n} {p:+}"))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    let mut tier = base;
    let mut raise = |to: ModelTier, why: String, tier: &mut ModelTier| {
        if to > *tier {
            *tier = to;
            reasons.push(why);
        }
    };
    if ctx.failures >= 2 {
        raise(
            ModelTier::Opus,
            format!("forced opus: {} prior failures", ctx.failures),
            &mut tier,
        );
    } else if ctx.failures == 1 {
        // Start cheap, learn from failure, send a stronger model.
        let prev = ctx.previous.unwrap_or(base);
        raise(
            prev.stronger(),
            format!("retry after a failure on {}: one tier up", prev.as_str()),
            &mut tier,
        );
    }
    if c.foundation && c.dependents >= 5 {
        raise(
            ModelTier::Opus,
            format!(
                "forced opus: foundation sprint with {} dependents",
                c.dependents
            ),
            &mut tier,
        );
    }
    if c.open_questions {
        raise(
            ModelTier::Opus,
            "forced opus: open questions (TBD) in the sprint".into(),
            &mut tier,
        );
    }
    if ctx.partial {
        raise(
            ModelTier::Sonnet,
            "at least sonnet for a continuation".into(),
            &mut tier,
        );
        if let Some(p) = ctx.previous {
            raise(
                p,
                format!("keep {} for the continuation", p.as_str()),
                &mut tier,
            );
        }
    }
    if ctx.failures == 0 && !ctx.partial && c.vague_criteria {
        raise(
            ModelTier::Sonnet,
            "at least sonnet: vague exit criteria".into(),
            &mut tier,
        );
    }
    (tier, reasons.join("; "))
}
