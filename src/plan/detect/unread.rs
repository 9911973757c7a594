//! Text the reader did not understand, said with its line: a code fence
//! never closed (it swallows the rest of the plan), a heading that looks
//! like a sprint and is not read as one, a code span never closed (its
//! command or path is not read), a control character. Where the plan's meaning changed because of
//! it — headings lost inside a fence, a sprint dropped — the plan is refused
//! with the fix; otherwise it is a warning.

use super::sprints::sprint_heading;
use super::{plain, Block, Doc, Problem};

/// Errors and warnings about text the reader could not take as meant.
pub(super) fn unread(doc: &Doc, errors: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    control_characters(&doc.source, errors);
    unclosed_fence(&doc.source, errors, warnings);
    for b in &doc.blocks {
        match b {
            Block::Heading { text, line, .. } => {
                if let Some(fixed) = sprint_without_separator(text) {
                    errors.push(
                        Problem::new(
                            *line,
                            format!("the heading `{}` looks like a sprint but is not read as one: the sprint would be dropped", plain(text)),
                        )
                        .hint(format!("put a colon after the sprint's number: `{fixed}`")),
                    );
                }
            }
            Block::Item { text, line, .. } | Block::Paragraph { text, line }
                if text.matches('`').count() % 2 == 1 =>
            {
                warnings.push(
                    Problem::new(
                        *line,
                        "a code span is not closed (an odd number of backticks): a command or path in it is not read, and a criterion here is left to a person",
                    )
                    .hint("close the span with a backtick: `path/to/file` exists, `cargo test` passes"),
                );
            }
            _ => {}
        }
    }
}

/// A control character (an escape sequence's ESC, a NUL) in a plan reaches
/// terminals, `plan show` and `SUPERVISOR_STATE.md` raw, and a NUL in a name
/// cannot be passed to an agent at all: refused at its line.
fn control_characters(source: &str, errors: &mut Vec<Problem>) {
    for (i, line) in source.lines().enumerate() {
        if let Some(c) = line
            .chars()
            .find(|c| c.is_control() && *c != '\t' && *c != '\r')
        {
            errors.push(
                Problem::new(
                    i + 1,
                    format!("this line holds a control character (U+{:04X}), which names, prompts and reports cannot carry", c as u32),
                )
                .hint("remove it (an editor that shows invisible characters helps)"),
            );
        }
    }
}

/// `Sprint 1 Page` → `Sprint 1: Page`: a sprint's number then its name,
/// without the separator the reader needs.
fn sprint_without_separator(text: &str) -> Option<String> {
    let t = plain(text);
    if sprint_heading(&t).is_some() {
        return None;
    }
    let rest = t
        .get(..6)
        .filter(|w| w.eq_ignore_ascii_case("sprint"))
        .map(|_| &t[6..])?;
    let rest = rest.strip_prefix(char::is_whitespace)?.trim_start();
    let id_len = rest
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest.len());
    let (id, name) = rest.split_at(id_len);
    if id.is_empty() || !id.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some(format!("{}{id}: {}", &t[..7], name.trim()))
}

/// A fence (three or more backticks or tildes) opened and never closed: the
/// rest of the document is code. An error when headings are lost in it.
fn unclosed_fence(source: &str, errors: &mut Vec<Problem>, warnings: &mut Vec<Problem>) {
    let mut open: Option<(char, usize, usize)> = None;
    let mut headings_inside = Vec::new();
    for (i, raw) in source.lines().enumerate() {
        let line = raw.trim_start();
        let indent = raw.len() - line.len();
        let fence = line
            .chars()
            .next()
            .filter(|c| (*c == '`' || *c == '~') && indent <= 3)
            .map(|c| (c, line.chars().take_while(|x| *x == c).count()))
            .filter(|(_, n)| *n >= 3);
        match (open, fence) {
            (None, Some((c, n))) => {
                open = Some((c, n, i + 1));
                headings_inside.clear();
            }
            (Some((c, n, _)), Some((c2, n2)))
                if c == c2 && n2 >= n && line[n2..].trim().is_empty() =>
            {
                open = None;
            }
            (Some(_), _) if line.starts_with('#') && indent <= 3 => {
                headings_inside.push(line.trim().to_string());
            }
            _ => {}
        }
    }
    let Some((c, n, at)) = open else { return };
    let close: String = std::iter::repeat_n(c, n).collect();
    let p = Problem::new(
        at,
        format!(
            "this code block is never closed, so the rest of the plan is read as code{}",
            match headings_inside.first() {
                Some(h) => format!(
                    ", {} included (from `{h}`)",
                    crate::text::count(headings_inside.len(), "heading")
                ),
                None => String::new(),
            }
        ),
    )
    .hint(format!("close it with a line holding only {close}"));
    if headings_inside.is_empty() {
        warnings.push(p);
    } else {
        errors.push(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sprint_heading_without_its_colon_is_named_with_the_fix() {
        assert_eq!(
            sprint_without_separator("Sprint 1 Page"),
            Some("Sprint 1: Page".into())
        );
        assert_eq!(
            sprint_without_separator("sprint 2a Tidy up"),
            Some("sprint 2a: Tidy up".into())
        );
        assert_eq!(sprint_without_separator("Sprint 1: Page"), None);
        assert_eq!(sprint_without_separator("Sprint 3"), None);
        assert_eq!(sprint_without_separator("Sprint planning"), None);
        assert_eq!(sprint_without_separator("Sprints"), None);
    }
}
