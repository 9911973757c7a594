//! Which phases a description asks for (seed 002's four scopes), by a rule a
//! person can predict: the rule and the word that decided are said in the
//! first reply, and `--scope` (or `scope:` after the command) overrides it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Phases 0–1: reports only.
    ResearchOnly,
    /// Phases 0–2: reports and a plan.
    ResearchAndPlan,
    /// Phases 0–4 and 6; 5 only when the tests fail.
    FullImplementation,
    /// Phases 0, 1 and 5.
    DebugOnly,
}

impl Scope {
    pub const ALL: [Scope; 4] = [
        Scope::ResearchOnly,
        Scope::ResearchAndPlan,
        Scope::FullImplementation,
        Scope::DebugOnly,
    ];

    /// The scopes' names, for messages that list them.
    pub fn names() -> String {
        Scope::ALL.map(Scope::as_str).join(", ")
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::ResearchOnly => "research-only",
            Scope::ResearchAndPlan => "research-and-plan",
            Scope::FullImplementation => "full-implementation",
            Scope::DebugOnly => "debug-only",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL
            .into_iter()
            .find(|s| s.as_str().eq_ignore_ascii_case(text.trim()))
    }

    /// The seed's phase numbers this scope runs (5 conditionally for a full
    /// implementation).
    pub fn phases(self) -> &'static str {
        match self {
            Scope::ResearchOnly => "0–1",
            Scope::ResearchAndPlan => "0–2",
            Scope::FullImplementation => "0–4 and 6 (5 only if the tests fail)",
            Scope::DebugOnly => "0, 1 and 5",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

const BUILD: &[&str] = &[
    "implement",
    "implementing",
    "build",
    "add",
    "adding",
    "create",
    "develop",
    "introduce",
    "support",
    "refactor",
    "migrate",
    "port",
    "rewrite",
    "make",
];
const DEBUG: &[&str] = &[
    "fix",
    "fixing",
    "debug",
    "crash",
    "crashes",
    "bug",
    "broken",
    "failing",
    "regression",
];
const PLAN: &[&str] = &[
    "plan", "design", "propose", "proposal", "roadmap", "strategy",
];
const RESEARCH: &[&str] = &[
    "research",
    "investigate",
    "analyze",
    "analyse",
    "explore",
    "study",
    "compare",
    "survey",
    "evaluate",
];

/// Words that make a building verb a planning one: "create a plan".
const PLAN_OBJECTS: &[&str] = &["plan", "design", "roadmap", "proposal", "strategy"];

/// The scope a description asks for, and why.
///
/// 1. The first building or debugging word decides between a full
///    implementation and debug-only ("Fix the crash…", "Add rate limiting…"),
///    except a building verb whose object is a plan ("create a plan").
/// 2. Otherwise a planning word: research and plan.
/// 3. Otherwise a research word: research only.
/// 4. Otherwise research and plan, the seed's most common scope, which
///    changes no code.
pub fn detect(description: &str) -> (Scope, String) {
    let words: Vec<String> = description
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect();
    for (i, w) in words.iter().enumerate() {
        let w = w.as_str();
        if BUILD.contains(&w) {
            let object = words[i + 1..].iter().take(3).find(|x| {
                !matches!(
                    x.as_str(),
                    "a" | "an" | "the" | "new" | "detailed" | "implementation"
                )
            });
            if object.is_some_and(|o| PLAN_OBJECTS.contains(&o.as_str())) {
                continue;
            }
            return (
                Scope::FullImplementation,
                format!("the first building or debugging word is \"{w}\""),
            );
        }
        if DEBUG.contains(&w) {
            return (
                Scope::DebugOnly,
                format!("the first building or debugging word is \"{w}\""),
            );
        }
    }
    if let Some(w) = words.iter().find(|w| PLAN.contains(&w.as_str())) {
        return (
            Scope::ResearchAndPlan,
            format!("it asks for a plan (\"{w}\") and nothing to build or fix"),
        );
    }
    if let Some(w) = words.iter().find(|w| RESEARCH.contains(&w.as_str())) {
        return (
            Scope::ResearchOnly,
            format!("it asks for research (\"{w}\") and no plan, build or fix"),
        );
    }
    (
        Scope::ResearchAndPlan,
        "no scope word found; research and a plan change no code".to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptions_get_the_scope_the_seed_describes() {
        for (text, scope) in [
            ("Add rate limiting to the API", Scope::FullImplementation),
            ("Implement OAuth login", Scope::FullImplementation),
            ("Fix the crash on empty input", Scope::DebugOnly),
            ("The parser crashes on empty input", Scope::DebugOnly),
            (
                "Research caching options to create a plan",
                Scope::ResearchAndPlan,
            ),
            ("Design the plugin system", Scope::ResearchAndPlan),
            (
                "Research how other tools handle retries",
                Scope::ResearchOnly,
            ),
            ("Investigate the slow start-up", Scope::ResearchOnly),
            (
                "Research auth libraries and implement login",
                Scope::FullImplementation,
            ),
            ("Fix the bug, then add a regression test", Scope::DebugOnly),
            ("Websocket notifications", Scope::ResearchAndPlan),
        ] {
            let (got, why) = detect(text);
            assert_eq!(got, scope, "{text}: {why}");
            assert!(!why.is_empty());
        }
    }

    #[test]
    fn every_scope_reads_back_from_its_name() {
        for s in Scope::ALL {
            assert_eq!(Scope::parse(s.as_str()), Some(s));
        }
        assert_eq!(Scope::parse("everything"), None);
    }
}
