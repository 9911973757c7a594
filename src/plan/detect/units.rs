//! §2a: which units a plan has — a table that lists them, or same-level
//! sections that each hold sprints — and the section each unit's sprints are in.

use super::{contains_word, plain, Block, HashMap, HeadingKind, Outline, Range, UnitDraft};

pub(super) fn norm_header(h: &str) -> String {
    plain(h)
        .to_lowercase()
        .replace(['_', '-'], " ")
        .trim()
        .to_string()
}

pub(super) fn column(header: &[String], names: &[&str]) -> Option<usize> {
    header.iter().position(|h| {
        let h = norm_header(h);
        names
            .iter()
            .any(|n| h == *n || h.starts_with(&format!("{n} ")))
    })
}

pub(super) const UNIT_COLUMNS: &[&str] = &[
    "work unit",
    "workunit",
    "package",
    "component",
    "module",
    "phase",
    "unit",
    "crate",
    "service",
];

/// §2a.1: a table with a unit column lists the units.
pub(super) fn table_units(blocks: &[Block]) -> Option<Vec<UnitDraft>> {
    for b in blocks {
        let Block::Table { header, rows, .. } = b else {
            continue;
        };
        let Some(name_col) = column(header, UNIT_COLUMNS) else {
            continue;
        };
        if column(header, &["sprint", "sprint id"]).is_some() {
            continue; // a sprint table, not a unit table
        }
        let dir_col = column(header, &["directory", "dir", "path", "location", "folder"]);
        let sprints_col = column(header, &["sprints", "sprint count", "# sprints"]);
        let layer_col = column(header, &["layer", "tier", "level"]);
        let deps_col = column(
            header,
            &["dependencies", "depends on", "deps", "requires", "needs"],
        );
        if dir_col.is_none() && sprints_col.is_none() && layer_col.is_none() && deps_col.is_none() {
            continue;
        }
        let cell = |r: &crate::plan::blocks::Row, c: Option<usize>| -> Option<String> {
            c.and_then(|c| r.cells.get(c))
                .map(|s| plain(s))
                .filter(|s| !is_none_word(s))
        };
        let units: Vec<UnitDraft> = rows
            .iter()
            .filter_map(|r| {
                let name = cell(r, Some(name_col))?;
                Some(UnitDraft {
                    line: r.line,
                    directory: cell(r, dir_col).map(|d| d.trim_end_matches('/').to_string()),
                    layer: cell(r, layer_col).and_then(|l| first_number(&l)),
                    declared_deps: cell(r, deps_col)
                        .map(|d| {
                            d.split([',', ';', '&'])
                                .flat_map(|p| p.split(" and "))
                                .map(|p| plain(p).trim_matches('/').to_string())
                                .filter(|p| !p.is_empty() && !is_none_word(p))
                                .map(|p| (p, r.line))
                                .collect()
                        })
                        .unwrap_or_default(),
                    declared_sprints: cell(r, sprints_col)
                        .and_then(|s| first_number(&s))
                        .map(|n| n as usize),
                    name,
                    region: None,
                })
            })
            .collect();
        if !units.is_empty() {
            return Some(units);
        }
    }
    None
}

pub(super) fn is_none_word(s: &str) -> bool {
    matches!(
        s.trim().to_lowercase().as_str(),
        "" | "-" | "—" | "–" | "none" | "n/a" | "—none—"
    )
}

pub(super) fn first_number(s: &str) -> Option<u32> {
    let digits: String = s
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Strips `Work Unit:`-style prefixes from a section heading.
pub(super) fn unit_heading_name(text: &str) -> String {
    let t = plain(text);
    let lower = t.to_lowercase();
    for p in [
        "work unit",
        "package",
        "component",
        "module",
        "unit",
        "crate",
        "service",
    ] {
        // Only a real prefix: `Package: parser`, `Work Unit — api`, not `unit-5`.
        let Some(rest) = lower.strip_prefix(p) else {
            continue;
        };
        if !rest.starts_with([':', ' ', '\t', '—']) {
            continue;
        }
        let rest = rest
            .trim_start_matches(|c: char| c.is_whitespace() || c == ':' || c == '—' || c == '-');
        if !rest.is_empty() {
            return t[t.len() - rest.len()..].trim().to_string();
        }
    }
    t
}

/// §2a.2: several same-level sections that each hold sprint definitions.
pub(super) fn section_units(blocks: &[Block], o: &Outline) -> Option<Vec<UnitDraft>> {
    for level in [2u8, 1, 3] {
        let mut units = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            let Some((l, text)) = b.heading() else {
                continue;
            };
            if l != level || o.defines_sprint(i) {
                continue;
            }
            let r = o.section(i);
            if o.has_defs(r.start + 1..r.end) {
                units.push(UnitDraft {
                    name: unit_heading_name(text),
                    line: b.line(),
                    directory: None,
                    layer: None,
                    declared_deps: Vec::new(),
                    declared_sprints: None,
                    region: Some(r.start + 1..r.end),
                });
            }
        }
        if units.len() >= 2 {
            return Some(units);
        }
    }
    None
}

/// The sections of table-listed units: for each, the heading that names it exactly
/// (`## parser`, `## Package: parser`) and holds sprints, else the first heading
/// that mentions it as a word. One pass over the headings for the exact names.
pub(super) fn unit_sections(
    blocks: &[Block],
    o: &Outline,
    names: &[&str],
) -> Vec<Option<Range<usize>>> {
    let index: HashMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_lowercase(), i))
        .collect();
    let mut found: Vec<Option<Range<usize>>> = vec![None; names.len()];
    let candidates: Vec<usize> = (0..blocks.len())
        .filter(|&i| {
            matches!(o.heading_kind(i), HeadingKind::Task | HeadingKind::Other)
                && o.has_defs(i + 1..o.section(i).end)
        })
        .collect();
    for &i in &candidates {
        let Some((_, text)) = blocks[i].heading() else {
            continue;
        };
        if let Some(&u) = index.get(&unit_heading_name(text).to_lowercase()) {
            if found[u].is_none() {
                found[u] = Some(i + 1..o.section(i).end);
            }
        }
    }
    for (u, name) in names.iter().enumerate() {
        if found[u].is_some() {
            continue;
        }
        let lname = name.to_lowercase();
        found[u] = candidates.iter().find_map(|&i| {
            let (_, text) = blocks[i].heading()?;
            contains_word(&plain(text).to_lowercase(), &lname).then(|| i + 1..o.section(i).end)
        });
    }
    found
}
