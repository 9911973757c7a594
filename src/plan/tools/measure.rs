//! Measures of a sprint that the engine's model selection (§6a) and the plan
//! tools (§16–§18) share: its text, the files it names, its turn estimate
//! (§17e), vague language, open questions, foundation words and risk.

use crate::plan::{Plan, Sprint};
use aho_corasick::AhoCorasick;
use std::sync::OnceLock;

/// A keyword list searched in one pass over the text (Aho-Corasick, built on
/// first use) instead of once per word: model selection reads every sprint
/// it dispatches through several of these.
pub struct Keywords {
    words: &'static [&'static str],
    automaton: OnceLock<AhoCorasick>,
}

impl Keywords {
    pub const fn new(words: &'static [&'static str]) -> Keywords {
        Keywords {
            words,
            automaton: OnceLock::new(),
        }
    }

    fn automaton(&self) -> &AhoCorasick {
        self.automaton
            .get_or_init(|| AhoCorasick::new(self.words).expect("fixed keyword lists build"))
    }

    /// Whether any of the words occurs in `text` (as `str::contains` would find it).
    pub fn found_in(&self, text: &str) -> bool {
        self.automaton().is_match(text)
    }

    /// The first of the words that occurs in `text` as a word of its own:
    /// `todo`, not the `todo` of `todos` or `mastodon`.
    pub fn word_in(&self, text: &str) -> Option<&'static str> {
        self.automaton()
            .find_overlapping_iter(text)
            .find(|m| whole_word(text, m.start(), m.end()))
            .map(|m| self.words[m.pattern().as_usize()])
    }
}

/// Whether `text[start..end]` stands as a word: no letter or digit joined
/// to it on either side where it begins or ends with one.
pub fn whole_word(text: &str, start: usize, end: usize) -> bool {
    let word = &text[start..end];
    let joined = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let starts_alnum = word.chars().next().is_some_and(char::is_alphanumeric);
    let ends_alnum = word.chars().next_back().is_some_and(char::is_alphanumeric);
    !(starts_alnum && joined(text[..start].chars().next_back()))
        && !(ends_alnum && joined(text[end..].chars().next()))
}

/// [`VAGUE`], [`OPEN_QUESTIONS`] and [`FOUNDATION`] as one-pass searches.
pub static VAGUE_WORDS: Keywords = Keywords::new(VAGUE);
pub static OPEN_QUESTION_WORDS: Keywords = Keywords::new(OPEN_QUESTIONS);
pub static FOUNDATION_WORDS: Keywords = Keywords::new(FOUNDATION);

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
    VAGUE_WORDS.found_in(&text.to_lowercase())
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

/// The words of each risk (§16c), highest first where several occur.
const RISK_WORDS: &[(&str, Risk)] = &[
    ("api", Risk::ExternalApi),
    ("http", Risk::ExternalApi),
    ("integration", Risk::ExternalApi),
    ("oauth", Risk::ExternalApi),
    ("network", Risk::ExternalApi),
    ("webhook", Risk::ExternalApi),
    ("third-party", Risk::ExternalApi),
    ("external", Risk::ExternalApi),
    ("new technology", Risk::NewTechnology),
    ("unfamiliar", Risk::NewTechnology),
    ("experimental", Risk::NewTechnology),
    ("migrate to", Risk::NewTechnology),
    ("prototype", Risk::NewTechnology),
    ("algorithm", Risk::Algorithm),
    ("parser", Risk::Algorithm),
    ("concurren", Risk::Algorithm),
    ("optimi", Risk::Algorithm),
    ("cache", Risk::Algorithm),
    ("scheduler", Risk::Algorithm),
    ("solver", Risk::Algorithm),
    ("file", Risk::SystemIo),
    ("i/o", Risk::SystemIo),
    ("process", Risk::SystemIo),
    ("system call", Risk::SystemIo),
    ("filesystem", Risk::SystemIo),
    ("disk", Risk::SystemIo),
    ("socket", Risk::SystemIo),
];

/// The highest risk whose words the (lower-cased) text holds, in one pass
/// over it.
pub fn risk(text: &str) -> Risk {
    static WORDS: OnceLock<AhoCorasick> = OnceLock::new();
    WORDS
        .get_or_init(|| {
            AhoCorasick::new(RISK_WORDS.iter().map(|(w, _)| w)).expect("fixed keyword lists build")
        })
        .find_overlapping_iter(text)
        .map(|m| RISK_WORDS[m.pattern().as_usize()].1)
        .max()
        .unwrap_or(Risk::Simple)
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// One pass finds what a search per word finds: the same words, the
        /// same highest risk.
        #[test]
        fn one_pass_searches_agree_with_a_search_per_word(
            text in "(api|file|parser|new technology|tbd|core|base |works well|clean up|[a-z /-]{0,6}|\\PC){0,12}"
        ) {
            for k in [&VAGUE_WORDS, &OPEN_QUESTION_WORDS, &FOUNDATION_WORDS] {
                proptest::prop_assert_eq!(
                    k.found_in(&text),
                    k.words.iter().any(|w| text.contains(w))
                );
            }
            let by_word = RISK_WORDS
                .iter()
                .filter(|(w, _)| text.contains(w))
                .map(|(_, r)| *r)
                .max()
                .unwrap_or(Risk::Simple);
            proptest::prop_assert_eq!(risk(&text), by_word);
        }
    }
}
