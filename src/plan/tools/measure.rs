//! Measures of a sprint that the engine's model selection (§6a) and the plan
//! tools (§16–§18) share: its text, the files it names, its turn estimate
//! (§17e), vague language, open questions, foundation words and risk.

use crate::plan::{Plan, Sprint};

/// Exit-criterion wording no machine can check (§17d).
pub const VAGUE: &[&str] = &[
    "works correctly",
    "properly handles",
    "is complete",
    "works well",
    "looks good",
    "as expected",
    "works fine",
    "is done",
];

/// Unresolved questions that would stop an agent (§18, Pass 1).
pub const OPEN_QUESTIONS: &[&str] = &[
    "tbd",
    "to be decided",
    "decide later",
    "determine later",
    "clarify",
    "open question",
    "???",
];

/// Words of a sprint that establishes what later sprints build on (§16b).
pub const FOUNDATION: &[&str] = &[
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

pub fn is_vague(text: &str) -> bool {
    let t = text.to_lowercase();
    VAGUE.iter().any(|v| t.contains(v))
}

/// The sprint's name, tasks and notes, lower-cased, for keyword checks.
pub fn text_of(s: &Sprint) -> String {
    let mut t = s.name.to_lowercase();
    for x in s.tasks.iter().chain(s.notes.iter()) {
        t.push(' ');
        t.push_str(&x.to_lowercase());
    }
    t
}

/// Path-like tokens in backticks: the files a task names.
pub fn file_names(text: &str) -> impl Iterator<Item = &str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| !c.contains(' ') && c.contains('.') && !c.ends_with('.'))
}

pub fn named_files(text: &str) -> usize {
    file_names(text).count()
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

/// The highest risk indicator a sprint's text shows (§6a, §16b).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Risk {
    Simple,
    SystemIo,
    Algorithm,
    NewTechnology,
    ExternalApi,
}

pub fn risk(text: &str) -> Risk {
    let any = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if any(&[
        "api",
        "http",
        "integration",
        "oauth",
        "network",
        "webhook",
        "third-party",
        "external",
    ]) {
        Risk::ExternalApi
    } else if any(&[
        "new technology",
        "unfamiliar",
        "experimental",
        "migrate to",
        "prototype",
    ]) {
        Risk::NewTechnology
    } else if any(&[
        "algorithm",
        "parser",
        "concurren",
        "optimi",
        "cache",
        "scheduler",
        "solver",
    ]) {
        Risk::Algorithm
    } else if any(&[
        "file",
        "i/o",
        "process",
        "system call",
        "filesystem",
        "disk",
        "socket",
    ]) {
        Risk::SystemIo
    } else {
        Risk::Simple
    }
}
