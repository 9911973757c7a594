//! §6a model selection: the complexity score from its five dimensions, the tier
//! thresholds, and the overrides. Every choice comes with its reason.

use super::events::ModelTier;
use crate::plan::tools::measure::{
    estimated_turns, is_vague, named_files, risk, text_of, Keywords, Risk, FOUNDATION_WORDS,
    OPEN_QUESTION_WORDS,
};
use crate::plan::{CriterionKind, Plan, SprintType, UnitGraph};

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

static OPEN_ENDED: Keywords = Keywords::new(&[
    "improve", "optimize", "optimise", "enhance", "clean up", "polish", "refine",
]);

/// `graph` is `plan`'s (the operation keeps it, so each dispatch does not
/// read the dependency names again).
pub fn complexity(plan: &Plan, graph: &UnitGraph, unit: usize, sprint: usize) -> Complexity {
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
    let vague_criteria =
        s.exit_criteria.is_empty() || s.exit_criteria.iter().any(|c| is_vague(&c.text));
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
        if OPEN_ENDED.found_in(&text) {
            5
        } else if files > 0 {
            0
        } else {
            3
        },
    ));

    let later_in_unit = u.sprints.len() - sprint - 1;
    let dependents = later_in_unit + graph.dependent_sprints(&plan.work_units, unit);
    let foundation = dependents >= 2 && FOUNDATION_WORDS.found_in(&text);
    parts.push(("foundation", if foundation { 5 } else { 0 }));
    parts.push((
        "dependents",
        match dependents {
            0..=1 => 0,
            2..=5 => 2,
            _ => 5,
        },
    ));
    let risk = match risk(&text) {
        Risk::ExternalApi => 5,
        Risk::NewTechnology => 4,
        Risk::Algorithm => 3,
        Risk::SystemIo => 2,
        Risk::Simple => 1,
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
        open_questions: OPEN_QUESTION_WORDS.word_in(&all_text).is_some(),
    }
}

/// What a dispatch is about to be, for the overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectionContext {
    pub failures: u32,
    pub partial: bool,
    pub previous: Option<ModelTier>,
    /// A round on work that is done and verified: only its merge, or what a
    /// reviewer asked, is left.
    pub round: Option<Round>,
}

/// Work on a verified sprint that is nobody's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Its branch no longer merges: merging is not harder work than doing
    /// it was, so it stays on the tier that did the work.
    Conflict,
    /// A reviewer asked for changes: on the tier that did the work, but at
    /// least sonnet — reading a person's comments against the code takes
    /// judgement, and a round that misreads them costs the reviewer's time.
    Review,
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
    match (ctx.round, ctx.previous) {
        (Some(Round::Conflict), Some(p)) => {
            reasons.push(format!("a conflict round stays on {}", p.as_str()));
            return (p, reasons.join("; "));
        }
        (Some(Round::Review), Some(p)) => {
            let tier = p.max(ModelTier::Sonnet);
            reasons.push(format!(
                "a review round stays on the tier that did the work ({}), at least sonnet",
                p.as_str()
            ));
            return (tier, reasons.join("; "));
        }
        _ => {}
    }
    let mut tier = base;
    let mut raise = |to: ModelTier, why: String, tier: &mut ModelTier| {
        if to > *tier {
            *tier = to;
            reasons.push(why);
        }
    };
    // A continuation goes on with the attempt it continues (below): the
    // attempt's failures were already answered when it began.
    match (ctx.partial, ctx.failures) {
        (true, _) | (false, 0) => {}
        (false, 1) => {
            // Start cheap, learn from failure, send a stronger model.
            let prev = ctx.previous.unwrap_or(base);
            let why = match prev.stronger() {
                up if up > prev => {
                    format!("retry after a failure on {}: one tier up", prev.as_str())
                }
                _ => format!(
                    "retry after a failure on {}: the strongest again",
                    prev.as_str()
                ),
            };
            raise(prev.stronger(), why, &mut tier);
        }
        (false, n) => raise(
            ModelTier::Opus,
            format!("forced opus: {n} prior failures"),
            &mut tier,
        ),
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
