//! §2d: entry and exit criteria — which lines are criteria, which are
//! commands, files or assertions — and the plan-wide checks every sprint gets.

#[allow(unused_imports)]
use super::*;

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

pub(super) fn label_of(text: &str) -> Option<Label> {
    let t = plain(text).to_lowercase();
    let t = t.trim_end_matches(':').trim();
    let has = |w: &str| t.contains(w);
    if t.split_whitespace().count() > 5 {
        return None;
    }
    Some(
        if has("entry") || has("precondition") || has("prerequisite") {
            Label::Entry
        } else if has("expected") {
            Label::Expected
        } else if has("validat")
            || has("execute")
            || has("verification")
            || t == "verify"
            || t == "commands"
        {
            Label::Validate
        } else if has("exit")
            || has("acceptance")
            || has("done when")
            || has("definition of done")
            || has("success criteria")
            || has("rules")
            || has("constraints")
        {
            Label::Exit
        } else if has("task")
            || has("deliverable")
            || has("steps")
            || t == "work"
            || has("scope")
            || t == "todo"
        {
            Label::Tasks
        } else if t == "type" || t == "sprint type" || t == "kind" {
            Label::Type
        } else if has("goal")
            || has("objective")
            || has("notes")
            || has("context")
            || has("description")
            || has("files")
            || has("priority")
            || has("dependencies")
            || has("estimate")
        {
            Label::Notes
        } else {
            return None;
        },
    )
}

/// A paragraph that opens with a label (`**Exit criteria**:`, `Entry Criteria:`)
/// gives the label and the text after it.
pub(super) fn paragraph_label(text: &str) -> Option<(Label, String)> {
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
            (head.to_string(), rest.to_string())
        } else {
            (head.to_string(), rest.strip_prefix(':')?.trim().to_string())
        }
    } else {
        let (head, rest) = t.split_once(':')?;
        (head.to_string(), rest.trim().to_string())
    };
    Some((label_of(&head)?, rest))
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

pub(super) fn inline_codes(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.to_string())
        .collect()
}

pub(super) fn criterion(text: &str, line: usize, label: Label) -> Criterion {
    let codes = inline_codes(text);
    let clean = plain(text);
    let lower = clean.to_lowercase();
    let commands: Vec<&String> = codes.iter().filter(|c| looks_like_command(c)).collect();
    let mut c = Criterion {
        kind: CriterionKind::Checklist,
        text: clean.clone(),
        line,
        command: None,
        expected: None,
        assertion: None,
    };
    let path = codes.iter().find(|c| looks_like_path(c));
    if let (Some(path), true) = (path, lower.contains("contain") && codes.len() >= 2) {
        let needle = codes
            .iter()
            .find(|c| *c != path)
            .cloned()
            .unwrap_or_default();
        c.kind = CriterionKind::Assertion;
        c.assertion = Some(Assertion::FileContains {
            path: path.clone(),
            text: needle,
        });
    } else if !commands.is_empty() && (!lower.contains(" exist") || commands.len() >= codes.len()) {
        c.kind = CriterionKind::Command;
        c.command = Some(
            commands
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" && "),
        );
    } else if let (Some(path), true) = (
        path,
        lower.contains("exist")
            || lower.contains("created")
            || lower.contains("present")
            || lower.contains("written"),
    ) {
        c.kind = CriterionKind::Assertion;
        c.assertion = Some(Assertion::FileExists { path: path.clone() });
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
/// sprint) holds checks for every sprint: its items and commands are added to
/// each sprint's entry or exit criteria.
pub(super) fn apply_plan_checks(doc: &Doc, o: &Outline, units: &mut [WorkUnit]) {
    let blocks = &doc.blocks;
    let sprint_heads: Vec<usize> = (0..blocks.len()).filter(|&i| o.defines_sprint(i)).collect();
    for (i, b) in blocks.iter().enumerate() {
        let Some((_, text)) = b.heading() else {
            continue;
        };
        let t = plain(text).to_lowercase();
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
