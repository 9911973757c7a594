//! §2e and §2f: the plan's own dispatch template and the progress, to-do,
//! status and config files it mentions.

use super::{
    body_text, plain, AhoCorasick, Block, DispatchTemplate, Doc, FileRole, Outline, ReferencedFile,
    UnitDraft,
};

/// §2e: the plan's own prompt template, if it has one.
pub(super) fn dispatch_template(doc: &Doc, o: &Outline) -> Option<DispatchTemplate> {
    let blocks = &doc.blocks;
    for (i, b) in blocks.iter().enumerate() {
        let Some((_, text)) = b.heading() else {
            continue;
        };
        let t = plain(text);
        let named = t
            .get(..10)
            .is_some_and(|p| p.eq_ignore_ascii_case("appendix d"))
            || [
                "dispatch template",
                "sprint prompt template",
                "agent prompt",
                "prompt template",
            ]
            .iter()
            .any(|k| crate::text::contains_lowercase(&t, k));
        if !named {
            continue;
        }
        let r = o.section(i);
        let text = blocks[r.clone()]
            .iter()
            .find_map(|b| match b {
                Block::Code { text, .. } => Some(text.clone()),
                _ => None,
            })
            .unwrap_or_else(|| {
                body_text(doc, i, r.end)
                    .lines()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .join("\n")
                    .trim()
                    .to_string()
            });
        if !text.is_empty() {
            return Some(DispatchTemplate {
                variables: crate::plan::template::variables(&text),
                text,
                line: b.line(),
            });
        }
    }
    for b in blocks {
        if let Block::Code {
            text, line, lang, ..
        } = b
        {
            if !matches!(lang.as_str(), "yaml" | "yml" | "") {
                continue;
            }
            let mut lines = text.lines();
            while let Some(l) = lines.next() {
                if let Some(v) = l.trim_start().strip_prefix("template:") {
                    let v = v.trim();
                    let body = if v == "|" || v == ">" || v.is_empty() {
                        lines
                            .by_ref()
                            .map(|l| l.strip_prefix("  ").unwrap_or(l.trim_start()))
                            .collect::<Vec<_>>()
                            .join("\n")
                    } else {
                        v.trim_matches('"').to_string()
                    };
                    if !body.trim().is_empty() {
                        return Some(DispatchTemplate {
                            variables: crate::plan::template::variables(&body),
                            text: body.trim().to_string(),
                            line: *line,
                        });
                    }
                }
            }
        }
    }
    None
}

/// The headings that open with a number (`8` in `## 8. Parser sprints`,
/// `8.2` in `### Section 8.2 — Tasks`), in document order: read once, then
/// asked per unit by [`SectionNumbers::above`].
pub(super) struct SectionNumbers(Vec<(usize, String)>);

impl SectionNumbers {
    pub(super) fn of(blocks: &[Block]) -> SectionNumbers {
        SectionNumbers(
            blocks
                .iter()
                .filter_map(|b| b.heading().map(|(_, text)| (b.line(), text)))
                .filter_map(|(line, text)| {
                    let t = plain(text);
                    let t = t.trim();
                    let t = t.strip_prefix("Section ").unwrap_or(t);
                    let n: String = t
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.')
                        .collect();
                    let n = n.trim_end_matches('.');
                    (!n.is_empty() && n.starts_with(|c: char| c.is_ascii_digit()))
                        .then(|| (line, n.to_string()))
                })
                .collect(),
        )
    }

    /// The number of the last numbered heading above `line`, if any.
    pub(super) fn above(&self, line: usize) -> Option<String> {
        let i = self.0.partition_point(|(l, _)| *l < line);
        i.checked_sub(1).map(|i| self.0[i].1.clone())
    }
}

/// §2f: progress, to-do, status and config files the plan mentions.
pub(super) fn referenced_files(blocks: &[Block], units: &[UnitDraft]) -> Vec<ReferencedFile> {
    let mut out: Vec<ReferencedFile> = Vec::new();
    let mut add = |path: String, role: FileRole, unit: Option<String>, line: usize| {
        if !out.iter().any(|f| f.path == path) {
            out.push(ReferencedFile {
                path,
                role,
                unit,
                exists: false,
                line,
            });
        }
    };
    let with_dirs: Vec<&UnitDraft> = units
        .iter()
        .filter(|u| u.directory.as_deref().is_some_and(|d| d != "."))
        .collect();
    for b in blocks {
        let (texts, line): (Vec<&str>, usize) = match b {
            Block::Heading { text, line, .. }
            | Block::Paragraph { text, line }
            | Block::Item { text, line, .. } => (vec![text.as_str()], *line),
            Block::Table { rows, line, .. } => (
                rows.iter()
                    .flat_map(|r| r.cells.iter().map(String::as_str))
                    .collect(),
                *line,
            ),
            Block::Code { .. } => continue,
        };
        static EXTENSIONS: std::sync::LazyLock<AhoCorasick> = std::sync::LazyLock::new(|| {
            AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build([".md", ".txt", ".yml", ".yaml", ".toml", ".json"])
                .expect("fixed patterns")
        });
        for text in texts {
            if !EXTENSIONS.is_match(text) {
                continue;
            }
            for raw in text.split(|c: char| c.is_whitespace() || "`()[],;\"'*".contains(c)) {
                let tok = raw.trim_end_matches(['.', ':', '!', '?']);
                let Some((role, placeholder)) = file_role(tok) else {
                    continue;
                };
                let base = tok.rsplit('/').next().unwrap_or(tok).to_string();
                if (placeholder || !tok.contains('/'))
                    && !with_dirs.is_empty()
                    && role != FileRole::Config
                {
                    for u in &with_dirs {
                        let dir = u.directory.as_deref().unwrap_or(".");
                        add(format!("{dir}/{base}"), role, Some(u.name.clone()), line);
                    }
                } else if !placeholder {
                    add(tok.trim_start_matches("./").to_string(), role, None, line);
                }
            }
        }
    }
    out
}

pub(super) fn file_role(tok: &str) -> Option<(FileRole, bool)> {
    let base = tok.rsplit('/').next()?;
    let (stem, ext) = base.rsplit_once('.')?;
    let ext = ext.to_lowercase();
    let stem_l = stem.to_lowercase();
    if stem.is_empty()
        || !base
            .chars()
            .all(|c| c.is_alphanumeric() || "._-".contains(c))
    {
        return None;
    }
    if matches!(
        stem_l.as_str(),
        "execution_plan" | "supervisor_state" | "analysis_report"
    ) || stem_l.starts_with("complete_")
    {
        return None;
    }
    let placeholder = tok.contains('<') || tok.contains('{') || tok.contains('$');
    let role = if ext == "md" || ext == "txt" {
        if stem_l.contains("progress") {
            FileRole::Progress
        } else if stem_l.contains("todo") {
            FileRole::Todo
        } else if stem_l.contains("status") {
            FileRole::Status
        } else {
            return None;
        }
    } else if matches!(ext.as_str(), "yml" | "yaml" | "toml" | "json")
        && (stem_l.contains("config") || stem_l.contains("settings") || stem.starts_with('.'))
    {
        FileRole::Config
    } else {
        return None;
    };
    Some((role, placeholder))
}
