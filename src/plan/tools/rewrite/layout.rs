//! A plan's text as the rewrites see it: lines with their endings, which
//! lines each sprint owns, and each owned line's role (heading, task, entry
//! or exit criterion) — so a rewrite moves what it changes and copies the
//! rest byte for byte. Also the small line edits they share: list items,
//! sprint numbers in headings and references.

use crate::plan::{Plan, Sprint};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Heading,
    Task,
    Entry,
    /// The entry criterion of a split's second part: the sprint before it.
    EntryPrevious,
    Exit,
    Other,
}

#[derive(Debug, Clone)]
pub(super) struct Line {
    pub(super) text: String,
    pub(super) role: Role,
}

/// One sprint's lines, and whether they could all be placed.
#[derive(Debug, Clone)]
pub(super) struct Section {
    pub(super) lines: Vec<Line>,
    pub(super) placed: bool,
}

impl Section {
    /// Its lines of one role, in order.
    pub(super) fn having(&self, role: Role) -> Vec<Line> {
        self.lines
            .iter()
            .filter(|l| l.role == role)
            .cloned()
            .collect()
    }
}

impl Line {
    pub(super) fn new(text: String, role: Role) -> Line {
        Line { text, role }
    }
}

/// The source split into lines (each with its ending), and which lines each
/// sprint owns.
pub(super) struct Layout {
    pub(super) lines: Vec<String>,
    /// Per unit, per sprint: the 0-based line range of its section, if it has
    /// a heading of its own.
    pub(super) ranges: Vec<Vec<Option<(usize, usize)>>>,
}

fn heading_level(line: &str) -> Option<usize> {
    let t = line.trim_start();
    let n = t.chars().take_while(|c| *c == '#').count();
    (n > 0 && n <= 6 && t[n..].starts_with(' ')).then_some(n)
}

impl Layout {
    pub(super) fn new(plan: &Plan, source: &str) -> Layout {
        let lines: Vec<String> = source.split_inclusive('\n').map(str::to_string).collect();
        let starts: Vec<usize> = plan
            .work_units
            .iter()
            .flat_map(|u| u.sprints.iter().map(|s| s.line.saturating_sub(1)))
            .collect();
        let ranges = plan
            .work_units
            .iter()
            .map(|u| {
                u.sprints
                    .iter()
                    .map(|s| {
                        let start = s.line.checked_sub(1)?;
                        let level = heading_level(lines.get(start)?)?;
                        let end = (start + 1..lines.len())
                            .find(|&i| {
                                starts.contains(&i)
                                    || heading_level(&lines[i]).is_some_and(|l| l <= level)
                            })
                            .unwrap_or(lines.len());
                        Some((start, end))
                    })
                    .collect()
            })
            .collect();
        Layout { lines, ranges }
    }

    pub(super) fn section(&self, s: &Sprint, range: (usize, usize)) -> Section {
        let (start, end) = range;
        let mut lines: Vec<Line> = self.lines[start..end]
            .iter()
            .map(|t| Line::new(t.clone(), Role::Other))
            .collect();
        lines[0].role = Role::Heading;
        for (criteria, role) in [
            (&s.entry_criteria, Role::Entry),
            (&s.exit_criteria, Role::Exit),
        ] {
            for c in criteria {
                if let Some(l) = c.line.checked_sub(1 + start).filter(|l| *l < lines.len()) {
                    // Only a criterion written as a list item is the rewrite's
                    // to move; a Validate block stays where it is.
                    if lines[l].role == Role::Other && item_text(&lines[l].text).is_some() {
                        lines[l].role = role;
                    }
                }
            }
        }
        let mut placed = true;
        let mut from = 1;
        for t in &s.tasks {
            let found = (from..lines.len()).find(|&i| {
                lines[i].role == Role::Other && item_text(&lines[i].text) == Some(t.trim())
            });
            match found {
                Some(i) => {
                    lines[i].role = Role::Task;
                    from = i + 1;
                }
                None => placed = false,
            }
        }
        Section { lines, placed }
    }
}

/// A list item's text without its marker (`- `, `* `, `1. `, `- [ ] `).
pub(super) fn item_text(line: &str) -> Option<&str> {
    let t = line.trim();
    let rest = if let Some(r) = t
        .strip_prefix("- ")
        .or_else(|| t.strip_prefix("* "))
        .or_else(|| t.strip_prefix("+ "))
    {
        r
    } else {
        let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        t[digits..]
            .strip_prefix(". ")
            .or_else(|| t[digits..].strip_prefix(") "))?
    };
    let rest = rest
        .strip_prefix("[ ] ")
        .or_else(|| rest.strip_prefix("[x] "))
        .unwrap_or(rest);
    Some(rest.trim())
}

/// The heading with its sprint number changed, if it says `Sprint <old>`.
pub(super) fn renumber_heading(line: &str, old: &str, new: usize) -> String {
    replace_sprint_ref(line, old, &new.to_string())
}

/// `Sprint <old>` (a whole number) replaced by `Sprint <new>`, once.
pub(super) fn replace_sprint_ref(line: &str, old: &str, new: &str) -> String {
    let pat = format!("Sprint {old}");
    let mut at = 0;
    while let Some(i) = line[at..].find(&pat) {
        let i = at + i;
        let after = line[i + pat.len()..].chars().next();
        if !after.is_some_and(|c| c.is_ascii_alphanumeric()) {
            return format!("{}Sprint {new}{}", &line[..i], &line[i + pat.len()..]);
        }
        at = i + pat.len();
    }
    line.to_string()
}

/// Every `Sprint <k>` reference renumbered by `map` (old number → new).
pub(super) fn renumber_refs(line: &str, map: &[(String, usize)]) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find("Sprint ") {
        out.push_str(&rest[..i + 7]);
        rest = &rest[i + 7..];
        let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let whole = !rest[n.len()..].starts_with(|c: char| c.is_ascii_alphanumeric());
        match map.iter().find(|(o, _)| *o == n) {
            Some((_, new)) if !n.is_empty() && whole => {
                out.push_str(&new.to_string());
                rest = &rest[n.len()..];
            }
            _ => {}
        }
    }
    out.push_str(rest);
    out
}

pub(super) fn ending(text: &str) -> &str {
    if text.ends_with("\r\n") {
        "\r\n"
    } else {
        "\n"
    }
}
