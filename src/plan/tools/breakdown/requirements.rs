//! §15b–c: finding a document's requirements (RFC words, user stories,
//! requirement and feature lists, checklists, task language), what it puts
//! out of scope, and splitting each requirement into atomic tasks. Grouping
//! the tasks into units and sprints is the parent module's.

use super::{Confidence, Requirement, Signal};
use crate::plan::blocks::{self, Block};
use crate::plan::tools::measure;

const TASK_VERBS: &[&str] = &[
    "implement",
    "create",
    "build",
    "add",
    "support",
    "enable",
    "integrate",
    "write",
    "fix",
    "remove",
    "update",
    "migrate",
    "replace",
    "refactor",
    "document",
    "allow",
    "provide",
    "expose",
    "store",
    "validate",
    "send",
    "show",
    "display",
    "make",
];

const OUT_OF_SCOPE: &[&str] = &[
    "out of scope",
    "non-goal",
    "non goal",
    "not included",
    "future work",
    "won't",
    "will not",
    "later version",
    "(v2)",
    "in v2",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requirements,
    Acceptance,
    Features,
    Context,
    OutOfScope,
    Plain,
}

fn kind_of(heading: &str) -> Kind {
    let h = heading.to_lowercase();
    let has = |ws: &[&str]| ws.iter().any(|w| h.contains(w));
    if has(OUT_OF_SCOPE) || has(&["v2", "later", "someday"]) {
        Kind::OutOfScope
    } else if has(&["acceptance", "definition of done", "done when"]) {
        Kind::Acceptance
    } else if has(&[
        "requirement",
        "user stor",
        "stories",
        "must have",
        "specification",
    ]) {
        Kind::Requirements
    } else if has(&[
        "feature",
        "deliverable",
        "scope",
        "task",
        "todo",
        "to do",
        "bug",
        "known issue",
        "fix",
        "roadmap",
        "milestone",
        "changes",
        "work items",
        "backlog",
    ]) {
        Kind::Features
    } else if has(&[
        "goal",
        "objective",
        "background",
        "overview",
        "motivation",
        "context",
        "constraint",
        "architecture",
        "introduction",
        "summary",
        "glossary",
        "reference",
        "note",
        "question",
        "install",
        "usage",
        "license",
        "contributing",
        "faq",
    ]) {
        Kind::Context
    } else {
        Kind::Plain
    }
}

fn is_rfc(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_alphabetic())
        .any(|w| matches!(w, "MUST" | "SHALL" | "SHOULD" | "MAY" | "REQUIRED"))
}

fn story(text: &str) -> Option<(String, String)> {
    let t = text.trim();
    let lower = t.to_lowercase();
    let rest = lower
        .strip_prefix("as a ")
        .or_else(|| lower.strip_prefix("as an "))?;
    let (role, goal) = rest.split_once(", i want")?;
    let goal = goal.strip_prefix(" to be able to ").unwrap_or(goal);
    let goal = goal.trim_start_matches(" to ").trim_start_matches(' ');
    let goal = goal.split(", so that").next().unwrap_or(goal);
    let goal = goal.split(" so that").next().unwrap_or(goal);
    // The goal in the document's own case.
    let start = t.len() - lower.len() + lower.find(goal).unwrap_or(0);
    let goal = &t[start..start + goal.len()];
    Some((
        role.trim().to_string(),
        goal.trim().trim_end_matches('.').to_string(),
    ))
}

fn starts_with_verb(text: &str) -> bool {
    let first = text
        .trim_start_matches(|c: char| !c.is_alphanumeric())
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_lowercase();
    TASK_VERBS
        .iter()
        .any(|v| first == *v || first == format!("{v}s"))
}

fn out_of_scope(text: &str) -> bool {
    let t = text.to_lowercase();
    OUT_OF_SCOPE.iter().any(|w| t.contains(w))
}

pub(super) fn first_upper(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// Sentences of a paragraph (a period, question or exclamation mark and a space).
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_code = false;
    let chars: Vec<char> = text.chars().collect();
    for (i, &ch) in chars.iter().enumerate() {
        cur.push(ch);
        if ch == '`' {
            in_code = !in_code;
        }
        let ends = matches!(ch, '.' | '!' | '?')
            && !in_code
            && chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if ends {
            out.push(cur.trim().to_string());
            cur.clear();
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// Backticked tokens that look like files (`src/lib.rs`, `web/index.html`).
pub(super) fn files_in(text: &str) -> Vec<String> {
    measure::file_names(text)
        .filter(|f| !f.starts_with('.') || f.contains('/'))
        .map(str::to_string)
        .collect()
}

/// Whether a command a document proposes may become an exit criterion as
/// it is: one plain command — words of letters, digits and `-_./:=,@%+` —
/// with nothing a shell would read as another command (`&&`, `;`, `|`,
/// `$(…)`, redirections, quotes). The document may be an issue anyone
/// opened, and a criterion is run by `supervise verify`: a chain such as
/// `cargo test && curl … | sh` is never proposed.
pub(super) fn plain_command(c: &str) -> bool {
    !c.trim().is_empty()
        && c.chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == ' ' || "-_./:=,@%+".contains(ch))
}

/// Backticked tokens that look like commands that check something.
pub(super) fn commands_in(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| plain_command(c))
        .filter(|c| {
            let first = c.split_whitespace().next().unwrap_or("");
            c.contains(' ')
                && matches!(
                    first,
                    "cargo"
                        | "npm"
                        | "pnpm"
                        | "yarn"
                        | "make"
                        | "pytest"
                        | "go"
                        | "just"
                        | "mvn"
                        | "gradle"
                        | "./gradlew"
                        | "dotnet"
                        | "bundle"
                        | "rake"
                        | "tox"
                )
        })
        .map(str::to_string)
        .collect()
}

/// 15c: one requirement's atomic tasks.
/// Whether a word is one of the verbs that start a task.
pub(super) fn is_task_verb(word: &str) -> bool {
    TASK_VERBS.contains(&word)
}

/// The first task of a change that would be its tests' only company: what
/// it is made of (its types and interfaces), so that a sprint holds 3 tasks.
pub(super) const DEFINE: &str = "Define the types and interfaces for: ";
/// The first task of a bug fix of one task: finding the cause.
pub(super) const FIND_CAUSE: &str = "Find the cause of: ";
/// The task that tests a change.
pub(super) const TESTS_FOR: &str = "Write tests for: ";

/// What a requirement asks, without why: a story's preamble ("As a cook,
/// I want") and its reason ("so that …") are not its concern.
pub(super) fn asked(text: &str) -> &str {
    let t = text.split(" so that ").next().unwrap_or(text);
    let t = t.split(", so that").next().unwrap_or(t);
    match t.to_ascii_lowercase().find(", i want") {
        Some(i) => &t[i + ", i want".len()..],
        None => t,
    }
}

/// Whether a requirement is a chore — tests, docs, configuration, a
/// rename — rather than a change of the code (which gets its own tests):
/// said in its words, not in the code names it quotes (`config.toml`).
pub(super) fn chore(text: &str) -> bool {
    const CHORES: &[&str] = &[
        "test",
        "doc",
        "docs",
        "documentation",
        "readme",
        "comment",
        "rename",
        "config",
        "configuration",
        "typo",
        "license",
        "changelog",
    ];
    text.split('`')
        .step_by(2)
        .flat_map(|prose| prose.split(|c: char| !c.is_alphanumeric()))
        .map(str::to_lowercase)
        .any(|w| CHORES.contains(&w.as_str()) || CHORES.contains(&w.trim_end_matches('s')))
}

/// `a` or `an` before `word`, as it is said.
fn article(word: &str) -> &'static str {
    let lower = word.to_lowercase();
    let vowel = lower.starts_with(['a', 'e', 'i', 'o', 'u']);
    // "a user", "a unit", "a one-off": a vowel letter, a consonant sound.
    let sounds_consonant = ["use", "uni", "eu", "one", "ur"]
        .iter()
        .any(|p| lower.starts_with(p));
    if vowel && !sounds_consonant {
        "an"
    } else {
        "a"
    }
}

/// Whether a story's goal names an action (`see the level`, `be notified`)
/// rather than a thing (`the predicted water level`).
fn is_action(goal: &str) -> bool {
    let first = goal.split_whitespace().next().unwrap_or("").to_lowercase();
    !matches!(
        first.as_str(),
        "the"
            | "a"
            | "an"
            | "my"
            | "our"
            | "their"
            | "his"
            | "her"
            | "its"
            | "some"
            | "every"
            | "all"
            | "each"
            | "this"
            | "that"
            | "these"
            | "those"
            | "more"
            | "fewer"
            | "no"
    ) && !first.chars().next().is_some_and(|c| c.is_ascii_digit())
}

pub(super) fn decompose(req: &Requirement) -> Vec<String> {
    let text = match (req.signal, story(&req.text)) {
        (Signal::UserStory, Some((role, goal))) => {
            // The story's goal in the third person: "my box" is the role's.
            let goal = format!(" {goal} ")
                .replace(" my ", " their ")
                .replace(" me ", " them ")
                .replace(" I ", " they ");
            let goal = goal.trim();
            // "I want the predicted level" asks for a thing: give it.
            match is_action(goal) {
                true => format!("Let {} {role} {goal}", article(&role)),
                false => format!("Give {} {role} {goal}", article(&role)),
            }
        }
        _ => req.text.trim().trim_end_matches('.').to_string(),
    };
    let lower = text.to_lowercase();
    let mut tasks: Vec<String> = Vec::new();
    // "Create X and integrate (it) with Y" → "Create X", "Integrate X with Y".
    if let Some(i) = lower.find(" and integrate ") {
        let (head, tail) = (&text[..i], &text[i + " and integrate ".len()..]);
        let tail = tail
            .strip_prefix("it ")
            .or_else(|| tail.strip_prefix("them "))
            .unwrap_or(tail);
        let object = head.split_once(' ').map_or(head, |x| x.1);
        tasks.push(head.to_string());
        tasks.push(format!("Integrate {object} {tail}"));
    } else if let Some(list) = support_list(&text) {
        // "Add support for A, B, and C": one task per independent item.
        tasks.extend(list);
    } else {
        // "and" joining distinct work: both sides start with a task verb.
        let mut parts = vec![text.clone()];
        if let Some(i) = lower.find(" and ") {
            let right = &text[i + 5..];
            if starts_with_verb(&text) && starts_with_verb(right) {
                parts = vec![text[..i].to_string(), first_upper(right)];
            }
        }
        for p in parts {
            tasks.extend(split_by_directory(&p));
        }
    }
    // Implicit test work, unless the work is tests, docs or configuration.
    if !chore(&text) {
        // The tests cover the requirement, every item of a list included.
        tasks.push(format!("{TESTS_FOR}{}", lowercase_first(&text)));
        // A sprint is 3 to 7 tasks (§15e) and one requirement (§17a): a
        // change of one task is split by its logical parts (§15c) — what
        // it is made of, then it, then its tests; a bug fix starts from
        // its cause.
        if tasks.len() < 3 {
            let first = match lower.strip_prefix("fix ") {
                Some(_) => format!("{FIND_CAUSE}{}", text[4..].trim_start()),
                None => format!("{DEFINE}{}", lowercase_first(&text)),
            };
            tasks.insert(0, first);
        }
    }
    tasks.into_iter().map(|t| first_upper(t.trim())).collect()
}

fn lowercase_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) if !s.starts_with('`') => f.to_lowercase().chain(c).collect(),
        Some(_) => s.to_string(),
        None => String::new(),
    }
}

/// "Add support for A, B and C" with short items: one task each.
fn support_list(text: &str) -> Option<Vec<String>> {
    let lower = text.to_lowercase();
    let at = lower.find("support for ")? + "support for ".len();
    let (head, list) = text.split_at(at);
    let items: Vec<&str> = list
        .split(", and ")
        .flat_map(|p| p.split(", "))
        .flat_map(|p| p.split(" and "))
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    if items.len() < 3 || items.iter().any(|i| i.split_whitespace().count() > 4) {
        return None;
    }
    // "JSON, CSV and HTML export": the last item's trailing words name what
    // every item is (a JSON export, a CSV export), so each keeps them.
    let last: Vec<&str> = items[items.len() - 1].split_whitespace().collect();
    let shared = (last.len() >= 2
        && items[..items.len() - 1]
            .iter()
            .all(|i| i.split_whitespace().count() == 1))
    .then(|| last[1..].join(" "));
    Some(
        items
            .iter()
            .map(|i| match &shared {
                Some(tail) if !i.ends_with(tail.as_str()) => format!("{head}{i} {tail}"),
                _ => format!("{head}{i}"),
            })
            .collect(),
    )
}

/// Files in different top-level directories: one task per directory cluster.
fn split_by_directory(task: &str) -> Vec<String> {
    let files = files_in(task);
    let mut dirs: Vec<&str> = files
        .iter()
        .filter_map(|f| f.split_once('/').map(|x| x.0))
        .collect();
    dirs.sort();
    dirs.dedup();
    if dirs.len() < 2 {
        return vec![task.to_string()];
    }
    dirs.iter()
        .map(|d| format!("{task} — the part in `{d}/`"))
        .collect()
}

/// One requirement found; a user story is the one later acceptance
/// criteria attach to.
fn record(
    reqs: &mut Vec<Requirement>,
    last_story: &mut Option<usize>,
    text: &str,
    section: String,
    line: usize,
    (signal, confidence): (Signal, Confidence),
) {
    reqs.push(Requirement {
        text: text.to_string(),
        section,
        line,
        confidence,
        signal,
        criteria: Vec::new(),
    });
    *last_story = (signal == Signal::UserStory).then(|| reqs.len() - 1);
}

/// 15b over the document's blocks.
pub(super) fn detect(blocks: &[Block]) -> (Vec<Requirement>, Vec<(usize, String)>) {
    let mut reqs: Vec<Requirement> = Vec::new();
    let mut out = Vec::new();
    let mut stack: Vec<(u8, String, Kind)> = Vec::new();
    let mut last_story: Option<usize> = None;
    for b in blocks {
        let section = || {
            stack
                .iter()
                .filter(|(l, _, _)| *l > 1)
                .map(|(_, t, _)| t.as_str())
                .collect::<Vec<_>>()
                .join(" › ")
        };
        let kind = stack
            .iter()
            .rev()
            .map(|(_, _, k)| *k)
            .find(|k| *k != Kind::Plain)
            .unwrap_or(Kind::Plain);
        match b {
            Block::Heading { level, text, .. } => {
                while stack.last().is_some_and(|(l, _, _)| l >= level) {
                    stack.pop();
                }
                stack.push((*level, blocks::plain(text), kind_of(text)));
                if kind_of(text) != Kind::Acceptance {
                    last_story = None;
                }
            }
            Block::Item {
                text,
                checked,
                depth,
                line,
            } => {
                let text = text.trim();
                if text.is_empty() || *checked == Some(true) {
                    continue;
                }
                if kind == Kind::OutOfScope || out_of_scope(text) {
                    out.push((*line, text.to_string()));
                    continue;
                }
                let given = text.to_lowercase().starts_with("given ");
                let under_story = *depth > 0 && last_story.is_some();
                if kind == Kind::Acceptance || given || under_story {
                    if let Some(r) = last_story.or(reqs.len().checked_sub(1)) {
                        reqs[r].criteria.push(text.to_string());
                    }
                    continue;
                }
                let signal = if story(text).is_some() {
                    Some((Signal::UserStory, Confidence::High))
                } else if is_rfc(text) {
                    Some((Signal::Rfc, Confidence::High))
                } else if kind == Kind::Requirements {
                    Some((Signal::RequirementList, Confidence::High))
                } else if kind == Kind::Features {
                    Some((Signal::FeatureList, Confidence::Medium))
                } else if *checked == Some(false) && kind != Kind::Context {
                    Some((Signal::Checklist, Confidence::Medium))
                } else if starts_with_verb(text) && kind != Kind::Context {
                    Some((Signal::TaskLanguage, Confidence::Medium))
                } else {
                    None
                };
                if let Some(found) = signal {
                    record(&mut reqs, &mut last_story, text, section(), *line, found);
                }
            }
            Block::Paragraph { text, line } => {
                if kind == Kind::OutOfScope {
                    out.push((*line, text.to_string()));
                    continue;
                }
                let lower = text.to_lowercase();
                if lower.starts_with("acceptance criteria") {
                    // The items that follow are the last story's criteria.
                    stack.push((u8::MAX, String::new(), Kind::Acceptance));
                    continue;
                }
                for s in sentences(text) {
                    if out_of_scope(&s) {
                        out.push((*line, s));
                        continue;
                    }
                    let signal = if story(&s).is_some() {
                        Some((Signal::UserStory, Confidence::High))
                    } else if is_rfc(&s) {
                        Some((Signal::Rfc, Confidence::High))
                    } else if starts_with_verb(&s)
                        && matches!(kind, Kind::Requirements | Kind::Features)
                    {
                        Some((Signal::TaskLanguage, Confidence::Medium))
                    } else {
                        None
                    };
                    if let Some(found) = signal {
                        record(&mut reqs, &mut last_story, &s, section(), *line, found);
                    }
                }
            }
            Block::Code { .. } | Block::Table { .. } => {}
        }
    }
    (reqs, out)
}

/// A generic section name, one that says what kind of list it is rather than
/// what the work is about: not a work unit's name.
pub(super) fn generic(section: &str) -> bool {
    let s = section.to_lowercase();
    kind_of(&s) != Kind::Plain && !s.contains(' ') || {
        let words = [
            "requirements",
            "functional requirements",
            "non-functional requirements",
            "features",
            "tasks",
            "user stories",
            "stories",
            "bugs",
            "known issues",
            "deliverables",
            "scope",
            "backlog",
            "todo",
        ];
        words.contains(&s.as_str())
    }
}

/// The test command the document's stack suggests, if any.
pub(super) fn test_command(doc: &str) -> Option<String> {
    if let Some(c) = commands_in(doc)
        .into_iter()
        .find(|c| c.contains("test") || c.contains("check"))
    {
        return Some(c);
    }
    let d = doc.to_lowercase();
    let has = |ws: &[&str]| ws.iter().any(|w| d.contains(w));
    if has(&["cargo", "rust", ".rs`"]) {
        Some("cargo test".into())
    } else if has(&["package.json", "typescript", "node", ".ts`", ".js`", "npm"]) {
        Some("npm test".into())
    } else if has(&["python", "pytest", ".py`", "django", "flask"]) {
        Some("pytest".into())
    } else if has(&["golang", "go.mod", ".go`"]) {
        Some("go test ./...".into())
    } else {
        None
    }
}
