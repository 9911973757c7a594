//! §2d: entry and exit criteria — which lines are criteria, which are
//! commands, files or assertions — and the plan-wide checks every sprint gets.

use super::{
    first_line, plain, AhoCorasick, Assertion, Block, Criterion, CriterionKind, Doc, Outline,
    Sprint, WorkUnit,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Label {
    Entry,
    Exit,
    /// `Validate` / `Execute`: code blocks here are exit commands.
    Validate,
    Expected,
    Tasks,
    Type,
    Notes,
}

/// The words that make a label, by the label they make, in the order they
/// are tried: a text with words of two labels is the earlier label.
const LABEL_WORDS: &[(Label, &[&str])] = &[
    (Label::Entry, &["entry", "precondition", "prerequisite"]),
    (Label::Expected, &["expected"]),
    (Label::Validate, &["validat", "execute", "verification"]),
    (
        Label::Exit,
        &[
            "exit",
            "acceptance",
            "done when",
            "definition of done",
            "success criteria",
            "rules",
            "constraints",
        ],
    ),
    (Label::Tasks, &["task", "deliverable", "steps", "scope"]),
    (
        Label::Notes,
        &[
            "goal",
            "objective",
            "notes",
            "context",
            "description",
            "files",
            "priority",
            "dependencies",
            "estimate",
        ],
    ),
];

/// Labels that are the whole text, not a word in it.
const LABEL_NAMES: &[(&str, Label)] = &[
    ("verify", Label::Validate),
    ("commands", Label::Validate),
    ("work", Label::Tasks),
    ("todo", Label::Tasks),
    ("type", Label::Type),
    ("sprint type", Label::Type),
    ("kind", Label::Type),
];

pub(super) fn label_of(text: &str) -> Option<Label> {
    let mut t = plain(text);
    if t.is_ascii() {
        t.make_ascii_lowercase();
    } else {
        t = t.to_lowercase();
    }
    let t = t.trim_end_matches(':').trim();
    if t.split_whitespace().nth(5).is_some() {
        return None;
    }
    // Every heading and every paragraph that might open a list asks: one scan
    // over the text for all the words, not a search per word.
    static WORDS: std::sync::LazyLock<(AhoCorasick, Vec<Label>)> = std::sync::LazyLock::new(|| {
        let (labels, words): (Vec<Label>, Vec<&str>) = LABEL_WORDS
            .iter()
            .flat_map(|(l, ws)| ws.iter().map(move |w| (*l, *w)))
            .unzip();
        (AhoCorasick::new(words).expect("fixed patterns"), labels)
    });
    let (ac, labels) = &*WORDS;
    let found = ac
        .find_overlapping_iter(t)
        .map(|m| labels[m.pattern().as_usize()]);
    let named = LABEL_NAMES.iter().find(|(n, _)| *n == t).map(|(_, l)| *l);
    let rank = |l: Label| match l {
        Label::Entry => 0,
        Label::Expected => 1,
        Label::Validate => 2,
        Label::Exit => 3,
        Label::Tasks => 4,
        Label::Type => 5,
        Label::Notes => 6,
    };
    found.chain(named).min_by_key(|l| rank(*l))
}

/// A paragraph that opens with a label (`**Exit criteria**:`, `Entry Criteria:`)
/// gives the label and the text after it.
pub(super) fn paragraph_label(text: &str) -> Option<(Label, &str)> {
    let t = text.trim();
    // A label is short and ends in a colon near the start: skip prose quickly.
    if !t.starts_with("**") && !t.get(..t.len().min(48)).is_some_and(|h| h.contains(':')) {
        return None;
    }
    let (head, rest) = if let Some(inner) = t.strip_prefix("**") {
        let close = inner.find("**")?;
        let head = &inner[..close];
        let rest = inner[close + 2..].trim_start();
        if head.trim_end().ends_with(':') {
            (head, rest)
        } else {
            (head, rest.strip_prefix(':')?.trim())
        }
    } else {
        let (head, rest) = t.split_once(':')?;
        (head, rest.trim())
    };
    Some((label_of(head)?, rest))
}

pub(super) fn push_criterion(s: &mut Sprint, text: &str, line: usize, l: Label) {
    let c = criterion(text, line, l);
    if l == Label::Entry {
        s.entry_criteria.push(c);
    } else {
        s.exit_criteria.push(c);
    }
}

/// A code block taken as a command criterion: its first line names it.
pub(super) fn command_criterion(text: &str, line: usize) -> Criterion {
    Criterion {
        kind: CriterionKind::Command,
        text: first_line(text),
        line,
        command: Some(text.trim().to_string()),
        expected: None,
        assertion: None,
    }
}

pub(super) const KNOWN_TOOLS: &[&str] = &[
    "make",
    "cargo",
    "npm",
    "npx",
    "yarn",
    "pnpm",
    "node",
    "python",
    "python3",
    "pytest",
    "go",
    "swift",
    "xcodebuild",
    "gradle",
    "mvn",
    "dotnet",
    "bash",
    "sh",
    "test",
    "grep",
    "ls",
    "cat",
    "diff",
    "curl",
    "docker",
    "git",
    "tsc",
    "ruby",
    "bundle",
    "rake",
    "deno",
    "bun",
    "jest",
    "ctest",
    "cmake",
    "java",
    "javac",
    "rustc",
    "gcc",
    "clang",
    "terraform",
    "kubectl",
    "helm",
    "uv",
    "poetry",
    "tox",
    "ruff",
    "mypy",
    "eslint",
    "wc",
    "jq",
    "find",
    "stat",
];

pub(super) fn looks_like_command(code: &str) -> bool {
    let code = code.trim();
    let Some(first) = code.split_whitespace().next() else {
        return false;
    };
    if first.starts_with("./") || first.ends_with(".sh") || KNOWN_TOOLS.contains(&first) {
        return true;
    }
    code.contains(' ')
        && first.len() >= 2
        && first
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

pub(super) fn looks_like_path(code: &str) -> bool {
    let code = code.trim();
    !code.is_empty()
        && !code.contains(char::is_whitespace)
        && (code.contains('/')
            || code.rsplit_once('.').is_some_and(|(a, ext)| {
                !a.is_empty()
                    && (1..=5).contains(&ext.len())
                    && ext.chars().all(|c| c.is_ascii_alphanumeric())
            }))
}

pub(super) fn inline_codes(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The text in double quotes (straight or curly) after the word "contain".
fn quoted_after_contain(text: &str) -> Option<String> {
    let at = text.find("contain")?;
    let rest = &text[at..];
    let open = rest.find(['"', '“'])?;
    let body = &rest[open + rest[open..].chars().next()?.len_utf8()..];
    let close = body.find(['"', '”'])?;
    Some(body[..close].to_string()).filter(|t| !t.is_empty())
}

/// What the words after a command criterion's command ask of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    /// Exit status 0 (`passes`, `succeeds`, or nothing said).
    Passes,
    /// Exit status 0 and nothing printed (`is empty`, `prints nothing`).
    Empty,
    /// A non-zero exit status (`fails`, `exits non-zero`).
    Fails,
}

/// The condition the words right after the command state; what they say
/// further on ("`npm test` passes (the old build fails)") is not one.
fn output_condition(after: &str) -> Condition {
    let after = after.trim_start_matches(|c: char| !c.is_alphanumeric());
    let says = |words: &[&str]| words.iter().any(|w| after.starts_with(w));
    if says(&[
        "is empty",
        "are empty",
        "prints nothing",
        "outputs nothing",
        "shows nothing",
        "returns nothing",
        "gives no output",
        "has no output",
        "produces no output",
    ]) {
        Condition::Empty
    } else if says(&[
        "fails",
        "exits non-zero",
        "exits nonzero",
        "returns non-zero",
    ]) {
        Condition::Fails
    } else {
        Condition::Passes
    }
}

pub(super) fn criterion(text: &str, line: usize, label: Label) -> Criterion {
    let codes = inline_codes(text);
    let clean = plain(text);
    let lower = if clean.is_ascii() {
        clean.to_ascii_lowercase()
    } else {
        clean.to_lowercase()
    };
    let commands: Vec<&str> = codes
        .iter()
        .copied()
        .filter(|c| looks_like_command(c))
        .collect();
    let mut c = Criterion {
        kind: CriterionKind::Checklist,
        text: clean,
        line,
        command: None,
        expected: None,
        assertion: None,
    };
    let path = codes.iter().copied().find(|c| looks_like_path(c));
    // What the file must contain: a second code span, or the quoted text
    // after "contains" (`out.txt` contains "Total").
    let needle = path.filter(|_| lower.contains("contain")).and_then(|path| {
        codes
            .iter()
            .find(|c| **c != path)
            .map(|c| c.to_string())
            .or_else(|| quoted_after_contain(text))
    });
    if let (Some(path), Some(needle)) = (path, needle) {
        c.kind = CriterionKind::Assertion;
        c.assertion = Some(Assertion::FileContains {
            path: path.to_string(),
            text: needle,
        });
    } else if !commands.is_empty() && (!lower.contains(" exist") || commands.len() >= codes.len()) {
        c.kind = CriterionKind::Command;
        let joined = commands.join(" && ");
        // What the words after the command ask of it: its exit status, or
        // its output being empty ("`git status --porcelain` is empty"), or
        // its failing — never the command alone when they ask for more.
        let after = text.rsplit('`').next().unwrap_or("").trim().to_lowercase();
        c.command = Some(match output_condition(&after) {
            Condition::Passes => joined,
            Condition::Empty => format!("out=$({joined}) && test -z \"$out\""),
            Condition::Fails => format!("! {{ {joined}; }}"),
        });
    } else if let (Some(path), true) = (
        path,
        lower.contains("exist")
            || lower.contains("created")
            || lower.contains("present")
            || lower.contains("written"),
    ) {
        c.kind = CriterionKind::Assertion;
        c.assertion = Some(Assertion::FileExists {
            path: path.to_string(),
        });
    } else if label == Label::Validate && !codes.is_empty() {
        c.kind = CriterionKind::Command;
        c.command = Some(codes.join(" && "));
    } else if lower.contains(" is ")
        || lower.contains(" == ")
        || lower.contains(" equals ")
        || lower.starts_with("no ")
    {
        c.kind = CriterionKind::Assertion;
    }
    c
}

/// §2d.3: a plan-wide "Entry Checks" or "Exit Checks" section (outside any
/// sprint) holds checks for every sprint: its items and commands, by the
/// list they join, in the order of the plan.
pub(super) fn plan_checks(doc: &Doc, o: &Outline) -> Vec<(Label, Vec<Criterion>)> {
    let blocks = &doc.blocks;
    let sprint_heads: Vec<usize> = (0..blocks.len()).filter(|&i| o.defines_sprint(i)).collect();
    let mut out = Vec::new();
    for (i, b) in blocks.iter().enumerate() {
        let Some((_, text)) = b.heading() else {
            continue;
        };
        let t = plain(text);
        // Most headings are no such section: one look before lowercasing.
        if !crate::text::contains_lowercase(&t, "checks") {
            continue;
        }
        let t = t.to_lowercase();
        let t = t.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ' ');
        let label = match t.trim_end_matches(':').trim() {
            "entry checks" => Label::Entry,
            "exit checks" => Label::Exit,
            _ => continue,
        };
        if sprint_heads.iter().any(|&h| h < i && o.section(h).end > i) {
            continue; // a sprint's own checks, already read with the sprint
        }
        let mut found = Vec::new();
        for b in &blocks[o.section(i).start + 1..o.section(i).end] {
            match b {
                Block::Item { text, line, .. } => found.push(criterion(text, *line, label)),
                Block::Code {
                    text,
                    line,
                    in_item: false,
                    lang,
                } if lang != "mermaid" && !text.trim().is_empty() => {
                    found.push(command_criterion(text, *line))
                }
                _ => {}
            }
        }
        out.push((label, found));
    }
    out
}

/// Adds the plan-wide checks of [`plan_checks`] to every sprint.
pub(super) fn apply_plan_checks(checks: Vec<(Label, Vec<Criterion>)>, units: &mut [WorkUnit]) {
    for (label, found) in checks {
        for s in units.iter_mut().flat_map(|u| u.sprints.iter_mut()) {
            let list = if label == Label::Entry {
                &mut s.entry_criteria
            } else {
                &mut s.exit_criteria
            };
            list.extend(found.iter().cloned());
        }
    }
}
