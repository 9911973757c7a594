//! The detection heuristics of §2a–§2g, applied in the specification's priority order
//! to the block list of a parsed document.

use super::blocks::{plain, Block, Doc};
use super::model::*;
use crate::text::{contains_word, nearest};
use aho_corasick::AhoCorasick;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

/// A unit found before its sprints are read: where it is defined and what the
/// plan declares about it.
struct UnitDraft {
    name: String,
    line: usize,
    directory: Option<String>,
    layer: Option<u32>,
    declared_deps: Vec<(String, usize)>,
    declared_sprints: Option<usize>,
    region: Option<Range<usize>>,
}

pub(crate) fn read(doc: &Doc, fallback_name: &str) -> Result<Plan, Vec<Problem>> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let blocks = &doc.blocks;
    let title = title(blocks)
        .map(|t| unit_name_from_title(&t))
        .unwrap_or_else(|| fallback_name.to_string());

    let o = Outline::new(blocks);
    let from_table = table_units(blocks);
    let tabled = from_table.is_some();
    let mut drafts = from_table
        .or_else(|| section_units(blocks, &o))
        .unwrap_or_else(|| {
            vec![UnitDraft {
                name: unit_name_from_title(&title),
                line: blocks.first().map_or(1, Block::line),
                directory: None,
                layer: None,
                declared_deps: Vec::new(),
                declared_sprints: None,
                region: Some(0..blocks.len()),
            }]
        });

    // Unit names must be unique: every later decision keys on them.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for d in &drafts {
        if let Some(first) = seen.insert(d.name.to_lowercase(), d.line) {
            errors.push(
                Problem::new(d.line, format!("work unit `{}` is defined twice", d.name)).hint(
                    format!("first definition at line {first}; give each unit its own name"),
                ),
            );
        }
    }

    if drafts.iter().any(|d| d.region.is_none()) {
        let names: Vec<&str> = drafts.iter().map(|d| d.name.as_str()).collect();
        let sections = unit_sections(blocks, &o, &names);
        for (d, r) in drafts.iter_mut().zip(sections) {
            d.region = d.region.take().or(r);
        }
    }
    if tabled {
        // A section that defines sprints but is no unit of the table would be
        // dropped without a word: say so.
        let table_line = drafts.first().map_or(1, |d| d.line);
        for c in section_units(blocks, &o).unwrap_or_default() {
            let Some(r) = &c.region else { continue };
            let covered = drafts.iter().any(|d| {
                d.region
                    .as_ref()
                    .is_some_and(|dr| dr.start < r.end && r.start < dr.end)
            });
            if !covered {
                warnings.push(
                    Problem::new(
                        c.line,
                        format!(
                            "section `{}` defines sprints, but the work-unit table does not list it; its sprints will not run",
                            c.name
                        ),
                    )
                    .hint(format!("add a row for `{}` to the table near line {table_line}, or move its sprints under a listed unit", c.name)),
                );
            }
        }
    }
    let mut units = Vec::new();
    for d in &mut drafts {
        let sprints = match &d.region {
            Some(r) => find_sprints(doc, &o, r.clone()),
            None => Vec::new(),
        };
        if sprints.is_empty() {
            errors.push(
                Problem::new(d.line, format!("work unit `{}` has no sprints", d.name)).hint(
                    "define them under a section named after the unit, as `### Sprint 1: <name>` headers, a sprint table, `### Task 1.1:` headers or checklists",
                ),
            );
        }
        let sprints = order_sprints(sprints, &d.name, &mut errors, &mut warnings);
        if let Some(n) = d.declared_sprints {
            if !sprints.is_empty() && n != sprints.len() {
                warnings.push(Problem::new(
                    d.line,
                    format!(
                        "work unit `{}` declares {n} sprints but {} are defined; using the definitions",
                        d.name,
                        sprints.len()
                    ),
                ));
            }
        }
        let section = sprints.first().and_then(|s| section_number(blocks, s.line));
        units.push(WorkUnit {
            name: d.name.clone(),
            directory: d.directory.clone(),
            layer: d.layer.unwrap_or(0),
            depends_on: Vec::new(),
            line: d.line,
            section,
            sprints,
        });
    }

    apply_plan_checks(doc, &o, &mut units);

    let has_layers = drafts.iter().any(|d| d.layer.is_some());
    let explicit = dependencies(doc, &drafts, &mut errors);
    let has_edges = !explicit.is_empty();
    for (i, u) in units.iter_mut().enumerate() {
        let mut deps: Vec<String> = explicit
            .iter()
            .filter(|(from, _)| *from == i)
            .map(|(_, to)| drafts[*to].name.clone())
            .collect();
        // Explicit edges are few; unit names are unique, so only they need deduping.
        let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
        deps.retain(|d| seen.insert(d.clone()));
        if has_layers {
            let mine = drafts[i].layer.unwrap_or(0);
            deps.extend(
                drafts
                    .iter()
                    .filter(|d| d.layer.unwrap_or(0) < mine && !seen.contains(&d.name))
                    .map(|d| d.name.clone()),
            );
        }
        u.depends_on = deps;
    }
    if let Some(cycle) = find_cycle(&units) {
        let line = units
            .iter()
            .find(|u| u.name == cycle[0])
            .map_or(1, |u| u.line);
        errors.push(
            Problem::new(line, format!("dependency cycle: {}", cycle.join(" → ")))
                .hint("a unit cannot wait for itself; remove one of these dependencies"),
        );
    } else if !has_layers {
        assign_depths(&mut units);
    }

    if units.iter().all(|u| u.sprints.is_empty())
        && errors.iter().all(|e| !e.message.contains("no sprints"))
    {
        errors.push(Problem::new(1, "the plan defines no sprints"));
    }
    if !errors.is_empty() {
        errors.sort_by_key(|p| p.line);
        return Err(errors);
    }

    let dependency_structure = if has_layers {
        DependencyStructure::Layers
    } else if has_edges {
        DependencyStructure::Graph
    } else if units.len() == 1 {
        DependencyStructure::Sequential
    } else {
        DependencyStructure::None
    };
    let dispatch_template = dispatch_template(doc, &o);
    if let Some(t) = &dispatch_template {
        // Every variable must be filled for every unit, or the agent reads it raw.
        let mut unfilled: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for u in &units {
            if let Some(s) = u.sprints.first() {
                for v in super::template::fill(&t.text, u, s).1 {
                    unfilled.entry(v).or_default().push(&u.name);
                }
            }
        }
        for (var, names) in unfilled {
            warnings.push(
                Problem::new(
                    t.line,
                    format!(
                        "the dispatch template's `{var}` cannot be filled for {}; agents will see it as written",
                        names.join(", ")
                    ),
                )
                .hint("use the template variables the supervisor knows (<PACKAGE_NAME>, <PACKAGE_DIR>, <N>, <SPRINT_NAME>, or a <8|9|…> choice of the section number that holds the unit's sprints), or write the value into the template"),
            );
        }
    }
    let referenced_files = referenced_files(blocks, &units);
    Ok(Plan {
        title,
        feature_name: doc
            .frontmatter
            .iter()
            .find(|(k, _)| k == "feature_name")
            .map(|(_, v)| v.clone())
            .filter(|v| !v.is_empty()),
        dependency_structure,
        dispatch_mode: if dispatch_template.is_some() {
            DispatchMode::Template
        } else {
            DispatchMode::Dynamic
        },
        dispatch_template,
        work_units: units,
        referenced_files,
        warnings,
    })
}

fn title(blocks: &[Block]) -> Option<String> {
    blocks.iter().find_map(|b| match b.heading() {
        Some((1, t)) if !plain(t).is_empty() => Some(plain(t)),
        _ => None,
    })
}

/// `EXECUTION_PLAN.md — Foo` names the project `Foo`.
fn unit_name_from_title(title: &str) -> String {
    let t = title.trim();
    if t.to_lowercase().starts_with("execution_plan")
        || t.to_lowercase().starts_with("execution plan")
    {
        for sep in ['—', '–', ':', '-'] {
            if let Some((_, rest)) = t.split_once(sep) {
                if !rest.trim().is_empty() {
                    return rest.trim().to_string();
                }
            }
        }
    }
    t.to_string()
}

fn norm_header(h: &str) -> String {
    plain(h)
        .to_lowercase()
        .replace(['_', '-'], " ")
        .trim()
        .to_string()
}

fn column(header: &[String], names: &[&str]) -> Option<usize> {
    header.iter().position(|h| {
        let h = norm_header(h);
        names
            .iter()
            .any(|n| h == *n || h.starts_with(&format!("{n} ")))
    })
}

const UNIT_COLUMNS: &[&str] = &[
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
fn table_units(blocks: &[Block]) -> Option<Vec<UnitDraft>> {
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
        let cell = |r: &super::blocks::Row, c: Option<usize>| -> Option<String> {
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

fn is_none_word(s: &str) -> bool {
    matches!(
        s.trim().to_lowercase().as_str(),
        "" | "-" | "—" | "–" | "none" | "n/a" | "—none—"
    )
}

fn first_number(s: &str) -> Option<u32> {
    let digits: String = s
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// Where every section ends and where sprint definitions are, computed once so
/// that no heuristic rescans the document (plans with thousands of units).
struct Outline {
    /// For a heading at `i`: the first block after its section.
    end: Vec<usize>,
    /// Prefix counts of blocks that define sprints (sprint/task headings, sprint tables).
    defs: Vec<u32>,
}

impl Outline {
    fn new(blocks: &[Block]) -> Outline {
        let mut end = vec![blocks.len(); blocks.len()];
        let mut open: Vec<(usize, u8)> = Vec::new();
        let mut defs = Vec::with_capacity(blocks.len() + 1);
        defs.push(0u32);
        for (i, b) in blocks.iter().enumerate() {
            if let Some((level, _)) = b.heading() {
                while open.last().is_some_and(|(_, l)| *l >= level) {
                    let (j, _) = open.pop().expect("checked");
                    end[j] = i;
                }
                open.push((i, level));
            }
            let is_def = match b {
                Block::Heading { text, .. } => {
                    sprint_heading(text).is_some() || task_heading(text).is_some()
                }
                Block::Table { header, .. } => is_sprint_table(header),
                _ => false,
            };
            defs.push(defs[i] + u32::from(is_def));
        }
        Outline { end, defs }
    }

    /// The blocks from heading `i` to the next heading of the same or a higher level.
    fn section(&self, i: usize) -> Range<usize> {
        i..self.end[i]
    }

    fn has_defs(&self, r: Range<usize>) -> bool {
        r.start < r.end && self.defs[r.end] > self.defs[r.start]
    }
}

/// Strips `Work Unit:`-style prefixes from a section heading.
fn unit_heading_name(text: &str) -> String {
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
fn section_units(blocks: &[Block], o: &Outline) -> Option<Vec<UnitDraft>> {
    for level in [2u8, 1, 3] {
        let mut units = Vec::new();
        for (i, b) in blocks.iter().enumerate() {
            let Some((l, text)) = b.heading() else {
                continue;
            };
            if l != level || sprint_heading(text).is_some() || task_heading(text).is_some() {
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
fn unit_sections(blocks: &[Block], o: &Outline, names: &[&str]) -> Vec<Option<Range<usize>>> {
    let index: HashMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.to_lowercase(), i))
        .collect();
    let mut found: Vec<Option<Range<usize>>> = vec![None; names.len()];
    let candidates: Vec<usize> = (0..blocks.len())
        .filter(|&i| {
            blocks[i]
                .heading()
                .is_some_and(|(_, t)| sprint_heading(t).is_none())
                && o.has_defs(i + 1..o.end[i])
        })
        .collect();
    for &i in &candidates {
        let Some((_, text)) = blocks[i].heading() else {
            continue;
        };
        if let Some(&u) = index.get(&unit_heading_name(text).to_lowercase()) {
            if found[u].is_none() {
                found[u] = Some(i + 1..o.end[i]);
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
            contains_word(&plain(text).to_lowercase(), &lname).then(|| i + 1..o.end[i])
        });
    }
    found
}

/// `Sprint 2a: Name` → (`2a`, `Name`).
pub(crate) fn sprint_heading(text: &str) -> Option<(SprintId, String)> {
    let t = plain(text);
    let lower = t.to_lowercase();
    let rest = lower.strip_prefix("sprint")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest_orig = t[t.len() - rest.len()..].trim_start();
    let id_len = rest_orig
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(rest_orig.len());
    let id = SprintId::parse(&rest_orig[..id_len])?;
    let after = rest_orig[id_len..].trim_start();
    let name = if after.is_empty() {
        format!("Sprint {id}")
    } else {
        let sep = after.chars().next()?;
        if !matches!(sep, ':' | '.' | '-' | '—' | '–' | '(') {
            return None;
        }
        after[sep.len_utf8()..]
            .trim()
            .trim_end_matches(')')
            .trim()
            .to_string()
    };
    let name = if name.is_empty() {
        format!("Sprint {id}")
    } else {
        name
    };
    Some((id, name))
}

/// `Task 3.2: Name` → (3, `Name`).
fn task_heading(text: &str) -> Option<(u32, String)> {
    let t = plain(text);
    let rest = t
        .strip_prefix("Task ")
        .or_else(|| t.strip_prefix("task "))?;
    let (num, name) = rest.split_once([':', ' ']).unwrap_or((rest, ""));
    let (major, minor) = num.trim_end_matches(':').split_once('.')?;
    minor.parse::<u32>().ok()?;
    Some((
        major.parse().ok()?,
        name.trim_start_matches(':').trim().to_string(),
    ))
}

fn is_sprint_table(header: &[String]) -> bool {
    column(header, &["sprint", "sprint id", "#"]).is_some()
        && column(
            header,
            &[
                "name",
                "description",
                "goal",
                "title",
                "deliverable",
                "objective",
            ],
        )
        .is_some()
}

/// §2b in priority order, within one unit's region.
fn find_sprints(doc: &Doc, o: &Outline, r: Range<usize>) -> Vec<Sprint> {
    let blocks = &doc.blocks;
    // 1. `## Sprint N:` headers.
    let heads: Vec<(usize, SprintId, String)> = (r.start..r.end)
        .filter_map(|i| {
            let (_, text) = blocks[i].heading()?;
            sprint_heading(text).map(|(id, name)| (i, id, name))
        })
        .collect();
    if !heads.is_empty() {
        return heads
            .into_iter()
            .map(|(i, id, name)| {
                let s = o.section(i);
                let end = s.end.min(r.end);
                build_sprint(doc, id, name, i, i + 1..end)
            })
            .collect();
    }
    // 2. A sprint table.
    for b in &blocks[r.clone()] {
        if let Block::Table { header, rows, .. } = b {
            if is_sprint_table(header) {
                return table_sprints(header, rows);
            }
        }
    }
    // 3. `### Task N.M:` headers grouped by N.
    let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for i in r.clone() {
        if let Some((_, text)) = blocks[i].heading() {
            if let Some((major, _)) = task_heading(text) {
                groups.entry(major).or_default().push(i);
            }
        }
    }
    if !groups.is_empty() {
        return groups
            .into_iter()
            .map(|(major, heads)| {
                let first = heads[0];
                let last = o.section(*heads.last().unwrap_or(&first));
                let mut s = build_sprint(
                    doc,
                    SprintId::ordinal(major as usize),
                    format!("Sprint {major}"),
                    first,
                    first + 1..last.end.min(r.end),
                );
                let titles: Vec<String> = heads
                    .iter()
                    .filter_map(|&h| blocks[h].heading().map(|(_, t)| plain(t)))
                    .collect();
                if let Some(t) = titles.first().and_then(|t| task_heading(t)).map(|(_, n)| n) {
                    if !t.is_empty() {
                        s.name = t;
                    }
                }
                let mut tasks = titles;
                tasks.append(&mut s.tasks);
                s.tasks = tasks;
                s.kind = classify(&s.name, &s.tasks, None);
                s
            })
            .collect();
    }
    // 4. Checklist groups under headers.
    let mut out = Vec::new();
    for i in r.clone() {
        let Some((_, text)) = blocks[i].heading() else {
            continue;
        };
        if label_of(text).is_some() {
            continue;
        }
        let end = blocks[i + 1..r.end]
            .iter()
            .position(|b| b.heading().is_some())
            .map_or(r.end, |p| i + 1 + p);
        let has_checks = blocks[i + 1..end].iter().any(|b| {
            matches!(
                b,
                Block::Item {
                    checked: Some(_),
                    ..
                }
            )
        });
        if has_checks {
            let s = o.section(i);
            out.push(build_sprint(
                doc,
                SprintId::ordinal(out.len() + 1),
                plain(text),
                i,
                i + 1..s.end.min(r.end),
            ));
        }
    }
    out
}

fn table_sprints(header: &[String], rows: &[super::blocks::Row]) -> Vec<Sprint> {
    let id_col = column(header, &["sprint", "sprint id", "#"]).unwrap_or(0);
    let name_col = column(
        header,
        &[
            "name",
            "title",
            "goal",
            "objective",
            "deliverable",
            "description",
        ],
    );
    let desc_col = column(header, &["description", "tasks", "deliverables", "scope"]);
    let entry_col = column(header, &["entry criteria", "entry", "preconditions"]);
    let exit_col = column(
        header,
        &[
            "exit criteria",
            "exit",
            "done when",
            "validation",
            "acceptance",
        ],
    );
    let type_col = column(header, &["type", "kind"]);
    rows.iter()
        .enumerate()
        .filter_map(|(n, r)| {
            let get =
                |c: Option<usize>| c.and_then(|c| r.cells.get(c)).cloned().unwrap_or_default();
            let id = SprintId::parse(&plain(&get(Some(id_col))))
                .unwrap_or_else(|| SprintId::ordinal(n + 1));
            let name = plain(&get(name_col));
            let tasks: Vec<String> = if desc_col.is_some() && desc_col != name_col {
                split_cell(&get(desc_col))
            } else {
                Vec::new()
            };
            let crit = |c: Option<usize>, label: Label| {
                split_cell(&get(c))
                    .into_iter()
                    .map(|t| criterion(&t, r.line, label))
                    .collect::<Vec<_>>()
            };
            let explicit = SprintType::parse(&plain(&get(type_col)));
            Some(Sprint {
                kind: classify(&name, &tasks, explicit),
                name: if name.is_empty() {
                    format!("Sprint {id}")
                } else {
                    name
                },
                id,
                line: r.line,
                entry_criteria: crit(entry_col, Label::Entry),
                exit_criteria: crit(exit_col, Label::Exit),
                tasks,
                notes: Vec::new(),
                body: r.cells.join(" | "),
            })
        })
        .collect()
}

fn split_cell(s: &str) -> Vec<String> {
    s.split("; ")
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty() && !is_none_word(p))
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Entry,
    Exit,
    /// `Validate` / `Execute`: code blocks here are exit commands.
    Validate,
    Expected,
    Tasks,
    Type,
    Notes,
}

fn label_of(text: &str) -> Option<Label> {
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
fn paragraph_label(text: &str) -> Option<(Label, String)> {
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

fn build_sprint(doc: &Doc, id: SprintId, name: String, head: usize, r: Range<usize>) -> Sprint {
    let blocks = &doc.blocks;
    let mut s = Sprint {
        id,
        name,
        line: blocks[head].line(),
        kind: SprintType::Code,
        tasks: Vec::new(),
        entry_criteria: Vec::new(),
        exit_criteria: Vec::new(),
        notes: Vec::new(),
        body: body_text(doc, head, r.end),
    };
    let mut label: Option<Label> = None;
    let mut explicit: Option<SprintType> = None;
    for b in &blocks[r] {
        match b {
            Block::Heading { text, .. } => label = Some(label_of(text).unwrap_or(Label::Notes)),
            Block::Paragraph { text, line } => {
                if let Some((l, rest)) = paragraph_label(text) {
                    label = Some(l);
                    if rest.is_empty() {
                        continue;
                    }
                    match l {
                        Label::Type => {
                            explicit = SprintType::parse(
                                plain(&rest).split_whitespace().next().unwrap_or(""),
                            )
                        }
                        Label::Entry => s.entry_criteria.push(criterion(&rest, *line, l)),
                        Label::Exit | Label::Validate => {
                            s.exit_criteria.push(criterion(&rest, *line, l))
                        }
                        _ => s.notes.push(plain(&rest)),
                    }
                } else {
                    match label {
                        Some(l @ (Label::Entry | Label::Exit)) if text.contains('`') => {
                            push_criterion(&mut s, text, *line, l)
                        }
                        _ => s.notes.push(text.clone()),
                    }
                }
            }
            Block::Item { text, line, .. } => match label {
                Some(l @ (Label::Entry | Label::Exit | Label::Validate)) => {
                    push_criterion(&mut s, text, *line, l)
                }
                // A checkbox that names a command, a file or an assertion is an
                // exit criterion in every plan shape (§2d), wherever it stands:
                // under a task, a notes heading or no label at all.
                _ if matches!(
                    b,
                    Block::Item {
                        checked: Some(_),
                        ..
                    }
                ) && criterion(text, *line, Label::Exit).kind != CriterionKind::Checklist =>
                {
                    s.exit_criteria.push(criterion(text, *line, Label::Exit))
                }
                Some(Label::Notes | Label::Expected | Label::Type) => s.notes.push(text.clone()),
                Some(Label::Tasks) | None => s.tasks.push(text.clone()),
            },
            Block::Code {
                text,
                line,
                in_item,
                lang,
            } => {
                if lang == "mermaid" || text.trim().is_empty() {
                    continue;
                }
                match label {
                    Some(Label::Expected) => {
                        if let Some(c) = s
                            .exit_criteria
                            .iter_mut()
                            .rev()
                            .find(|c| c.command.is_some())
                        {
                            c.expected = Some(text.trim().to_string());
                        }
                    }
                    Some(l @ (Label::Entry | Label::Exit | Label::Validate)) => {
                        let list = if l == Label::Entry {
                            &mut s.entry_criteria
                        } else {
                            &mut s.exit_criteria
                        };
                        match list.last_mut() {
                            Some(c) if *in_item && c.command.is_none() && c.line < *line => {
                                c.kind = CriterionKind::Command;
                                c.command = Some(text.trim().to_string());
                                c.assertion = None;
                            }
                            _ => list.push(command_criterion(text, *line)),
                        }
                    }
                    _ => {}
                }
            }
            Block::Table { .. } => {}
        }
    }
    s.kind = classify(&s.name, &s.tasks, explicit);
    s
}

fn push_criterion(s: &mut Sprint, text: &str, line: usize, l: Label) {
    let c = criterion(text, line, l);
    if l == Label::Entry {
        s.entry_criteria.push(c);
    } else {
        s.exit_criteria.push(c);
    }
}

/// A code block taken as a command criterion: its first line names it.
fn command_criterion(text: &str, line: usize) -> Criterion {
    Criterion {
        kind: CriterionKind::Command,
        text: first_line(text),
        line,
        command: Some(text.trim().to_string()),
        expected: None,
        assertion: None,
    }
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

fn body_text(doc: &Doc, head: usize, end: usize) -> String {
    let start = match &doc.blocks[head] {
        Block::Heading { offset, .. } => *offset,
        _ => return String::new(),
    };
    let stop = doc.blocks[end..]
        .iter()
        .find_map(|b| match b {
            Block::Heading { offset, .. } => Some(*offset),
            _ => None,
        })
        .unwrap_or(doc.source.len());
    doc.source
        .get(start..stop.max(start))
        .unwrap_or("")
        .replace('\r', "")
        .trim_end()
        .to_string()
}

const KNOWN_TOOLS: &[&str] = &[
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

fn looks_like_command(code: &str) -> bool {
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

fn looks_like_path(code: &str) -> bool {
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

fn inline_codes(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.to_string())
        .collect()
}

fn criterion(text: &str, line: usize, label: Label) -> Criterion {
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

/// §2g: the sprint's type from its name (weighted) and its tasks.
fn classify(name: &str, tasks: &[String], explicit: Option<SprintType>) -> SprintType {
    if let Some(t) = explicit {
        return t;
    }
    const INDICATORS: &[(SprintType, &[&str])] = &[
        (
            SprintType::Manual,
            &[
                "listen",
                "visit",
                "check browser",
                "check the browser",
                "spot-check",
                "spot check",
                "human judgment",
                "human judgement",
                "manually",
                "manual review",
                "by hand",
            ],
        ),
        (
            SprintType::Deferred,
            &[
                "wait for",
                "wait until",
                "monitor",
                "check deployment",
                "poll until",
                "once deployed",
            ],
        ),
        (
            SprintType::Background,
            &[
                "kick off",
                "nohup",
                "background",
                "long-running",
                "overnight",
            ],
        ),
        (
            SprintType::Command,
            &["run ", "execute", "deploy", "migrate the", "publish"],
        ),
        (
            SprintType::Code,
            &[
                "write",
                "create",
                "implement",
                "build",
                "fix",
                "add ",
                "refactor",
                "port ",
                "define",
            ],
        ),
    ];
    // One automaton over every indicator: each text is scanned once.
    static MATCHER: std::sync::LazyLock<(AhoCorasick, Vec<SprintType>)> =
        std::sync::LazyLock::new(|| {
            let (kinds, words): (Vec<SprintType>, Vec<&str>) = INDICATORS
                .iter()
                .flat_map(|(k, ws)| ws.iter().map(move |w| (*k, *w)))
                .unzip();
            let ac = AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .match_kind(aho_corasick::MatchKind::Standard)
                .build(words)
                .expect("fixed patterns");
            (ac, kinds)
        });
    let (ac, kinds) = &*MATCHER;
    let mut scores = [0usize; 5];
    for (i, text) in std::iter::once(name)
        .chain(tasks.iter().map(String::as_str))
        .enumerate()
    {
        let weight = if i == 0 { 3 } else { 1 };
        let padded = format!("{text} ");
        let mut seen = std::collections::HashSet::new();
        for m in ac.find_overlapping_iter(&padded) {
            if seen.insert(m.pattern()) {
                scores[kinds[m.pattern().as_usize()] as usize] += weight;
            }
        }
    }
    if name
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("start "))
    {
        scores[SprintType::Background as usize] += 3;
    }
    // Ties go to the earlier entry of INDICATORS (manual before code).
    let mut best = (0usize, SprintType::Code);
    for (t, _) in INDICATORS {
        if scores[*t as usize] > best.0 {
            best = (scores[*t as usize], *t);
        }
    }
    best.1
}

/// Orders sprints by id (2a before 2b) and refuses duplicate ids.
fn order_sprints(
    mut sprints: Vec<Sprint>,
    unit: &str,
    errors: &mut Vec<Problem>,
    warnings: &mut Vec<Problem>,
) -> Vec<Sprint> {
    let mut seen: BTreeMap<SprintId, usize> = BTreeMap::new();
    for s in &sprints {
        if let Some(first) = seen.insert(s.id.clone(), s.line) {
            errors.push(
                Problem::new(
                    s.line,
                    format!("work unit `{unit}` defines sprint {} twice", s.id),
                )
                .hint(format!(
                    "first definition at line {first}; give each sprint its own id, e.g. 2a and 2b"
                )),
            );
        }
    }
    if sprints.windows(2).any(|w| w[0].id > w[1].id) {
        let line = sprints.first().map_or(1, |s| s.line);
        warnings.push(Problem::new(
            line,
            format!("sprints of `{unit}` are not written in order; running them by id"),
        ));
        sprints.sort_by(|a, b| a.id.cmp(&b.id));
    }
    sprints
}

/// Explicit dependency edges `(dependent, dependency)` as unit indices (§2c.2).
fn dependencies(
    doc: &Doc,
    drafts: &[UnitDraft],
    errors: &mut Vec<Problem>,
) -> BTreeSet<(usize, usize)> {
    let names: Vec<String> = drafts.iter().map(|d| d.name.to_lowercase()).collect();
    let index = NameIndex::new(&names);
    let find = |n: &str| {
        index
            .words
            .get(n.to_lowercase().as_str())
            .copied()
            .or_else(|| names.iter().position(|x| *x == n.to_lowercase()))
    };
    let mut edges = BTreeSet::new();
    for (i, d) in drafts.iter().enumerate() {
        for (dep, line) in &d.declared_deps {
            if dep.trim().eq_ignore_ascii_case("all") {
                // `all`: every unit of the lower layers, or every unit listed
                // before this one when the plan has no layers.
                let mine = d.layer;
                for (j, other) in drafts.iter().enumerate() {
                    let below = match (mine, other.layer) {
                        (Some(m), Some(o)) => o < m,
                        _ => j < i,
                    };
                    if below {
                        edges.insert((i, j));
                    }
                }
                continue;
            }
            match find(dep)
                .map(Ok)
                .unwrap_or_else(|| resolve_short(dep, drafts))
            {
                Ok(j) => {
                    edges.insert((i, j));
                }
                Err(candidates) if candidates.len() > 1 => {
                    errors.push(
                        Problem::new(
                            *line,
                            format!(
                                "work unit `{}` depends on `{dep}`, which could be any of {}",
                                d.name,
                                candidates
                                    .iter()
                                    .map(|c| format!("`{c}`"))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                        )
                        .hint("write the unit's full name"),
                    );
                }
                Err(_) => {
                    let mut p = Problem::new(
                        *line,
                        format!(
                            "work unit `{}` depends on `{dep}`, which the plan does not define",
                            d.name
                        ),
                    );
                    if let Some(n) = nearest(dep, drafts.iter().map(|d| d.name.as_str())) {
                        p = p.hint(format!("did you mean `{n}`?"));
                    } else {
                        p = p.hint("list only units named in the work-unit table");
                    }
                    errors.push(p);
                }
            }
        }
    }
    if drafts.len() < 2 {
        return edges;
    }
    // The unit whose section holds each block, for sentences without a subject.
    let mut owners: Vec<Option<usize>> = vec![None; doc.blocks.len()];
    for (u, d) in drafts.iter().enumerate() {
        for slot in d.region.clone().into_iter().flatten() {
            owners[slot].get_or_insert(u);
        }
    }
    let owner = |idx: usize| owners[idx];
    let mut dep_section = false;
    for (idx, b) in doc.blocks.iter().enumerate() {
        let (text, arrows_ok) = match b {
            Block::Heading { text, .. } => {
                let t = text.to_lowercase();
                dep_section = t.contains("depend")
                    || t.contains("order")
                    || t.contains("graph")
                    || t.contains("layer");
                (text.as_str(), false)
            }
            Block::Paragraph { text, .. } | Block::Item { text, .. } => {
                (text.as_str(), dep_section)
            }
            Block::Code { lang, text, .. } => {
                if lang == "mermaid" {
                    mermaid_edges(text, &names, &mut edges);
                    continue;
                }
                (
                    text.as_str(),
                    lang.is_empty() || lang == "text" || lang == "ascii",
                )
            }
            Block::Table { .. } => continue,
        };
        // Most blocks name no dependency at all: skip them with one cheap scan.
        static HINTS: std::sync::LazyLock<AhoCorasick> = std::sync::LazyLock::new(|| {
            AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build(DEP_HINTS)
                .expect("fixed patterns")
        });
        if !arrows_ok && !HINTS.is_match(text) {
            continue;
        }
        let block_lower = text.to_lowercase();
        for lower in block_lower.split(['.', ';', '\n']) {
            if arrows_ok {
                arrow_edges(lower, &index, &mut edges);
            }
            for kw in [
                "depends on",
                "depend on",
                "requires",
                "needs",
                "preconditions:",
                "precondition:",
                "dependencies:",
                "blocked by",
                "waits for",
            ] {
                let Some(pos) = lower.find(kw) else { continue };
                let (before, after) = (&lower[..pos], &lower[pos + kw.len()..]);
                let objects = index.mentions(after);
                let mut subjects = index.mentions(before);
                if subjects.is_empty() {
                    subjects.extend(owner(idx));
                }
                for &s in &subjects {
                    for &o in &objects {
                        if s != o {
                            edges.insert((s, o));
                        }
                    }
                }
            }
        }
    }
    edges
}

/// §2d.3: a plan-wide "Entry Checks" or "Exit Checks" section (outside any
/// sprint) holds checks for every sprint: its items and commands are added to
/// each sprint's entry or exit criteria.
fn apply_plan_checks(doc: &Doc, o: &Outline, units: &mut [WorkUnit]) {
    let blocks = &doc.blocks;
    let sprint_heads: Vec<usize> = (0..blocks.len())
        .filter(|&i| {
            blocks[i]
                .heading()
                .is_some_and(|(_, t)| sprint_heading(t).is_some() || task_heading(t).is_some())
        })
        .collect();
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

/// A unit name without case, spaces, hyphens, underscores or dots.
fn squash(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, ' ' | '-' | '_' | '.' | '/'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// A dependency written in a shortened or differently spelled form: the same
/// name ignoring case, spaces and hyphens (`API v1` for `api-v1`), or the tail
/// or head of exactly one unit's name at a separator (`validation-profiles` for
/// `SwiftVerificar-validation-profiles`). `Err` carries the candidates when
/// more than one unit fits (none when no unit does).
fn resolve_short(dep: &str, drafts: &[UnitDraft]) -> Result<usize, Vec<String>> {
    let want = squash(dep);
    if want.is_empty() {
        return Err(Vec::new());
    }
    let same: Vec<usize> = (0..drafts.len())
        .filter(|&j| squash(&drafts[j].name) == want)
        .collect();
    if let [j] = same[..] {
        return Ok(j);
    }
    let dep_lower = dep.trim().to_lowercase();
    let sep = |c: Option<char>| c.is_none_or(|c| matches!(c, ' ' | '-' | '_' | '.' | '/'));
    let part: Vec<usize> = (0..drafts.len())
        .filter(|&j| {
            let name = drafts[j].name.to_lowercase();
            let tail = name
                .strip_suffix(dep_lower.as_str())
                .is_some_and(|head| !head.is_empty() && sep(head.chars().last()));
            let head = name
                .strip_prefix(dep_lower.as_str())
                .is_some_and(|rest| !rest.is_empty() && sep(rest.chars().next()));
            tail || head
        })
        .collect();
    match part[..] {
        [j] => Ok(j),
        _ => Err(part
            .iter()
            .chain(&same)
            .map(|&j| drafts[j].name.clone())
            .collect()),
    }
}

/// Substrings every dependency keyword contains (a cheap pre-filter).
const DEP_HINTS: &[&str] = &[
    "depend",
    "requires",
    "needs",
    "precondition",
    "blocked by",
    "waits for",
];

/// Finds unit names in text by word lookup, so a sentence costs its length, not
/// its length times the number of units.
struct NameIndex<'a> {
    names: &'a [String],
    words: HashMap<&'a str, usize>,
    /// Names with characters outside words (spaces, `+`…): matched one by one.
    other: Vec<usize>,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '-' || c == '_'
}

impl<'a> NameIndex<'a> {
    fn new(names: &'a [String]) -> NameIndex<'a> {
        let mut words = HashMap::new();
        let mut other = Vec::new();
        for (i, n) in names.iter().enumerate() {
            if !n.is_empty() && n.chars().all(is_word_char) {
                words.entry(n.as_str()).or_insert(i);
            } else {
                other.push(i);
            }
        }
        NameIndex {
            names,
            words,
            other,
        }
    }

    /// Indices of the units named in `lower` (already lower-case), ascending.
    fn mentions(&self, lower: &str) -> Vec<usize> {
        let mut found: Vec<usize> = lower
            .split(|c: char| !is_word_char(c))
            .filter_map(|w| self.words.get(w).copied())
            .collect();
        found.extend(
            self.other
                .iter()
                .copied()
                .filter(|&j| contains_word(lower, &self.names[j])),
        );
        found.sort_unstable();
        found.dedup();
        found
    }
}

/// `a ──► b`, `a -> b`, `a → b`: b depends on a.
fn arrow_edges(line: &str, index: &NameIndex, edges: &mut BTreeSet<(usize, usize)>) {
    let mut norm = line.to_string();
    for a in ["──►", "──>", "-->", "->", "→", "=>", "⟶"] {
        norm = norm.replace(a, "\u{1}");
    }
    let parts: Vec<Vec<usize>> = norm
        .split('\u{1}')
        .map(|p| index.mentions(p.trim()))
        .collect();
    for w in parts.windows(2) {
        for &from in &w[0] {
            for &to in &w[1] {
                if from != to {
                    edges.insert((to, from));
                }
            }
        }
    }
}

/// Mermaid `graph`/`flowchart` edges; node ids or labels name units.
fn mermaid_edges(text: &str, names: &[String], edges: &mut BTreeSet<(usize, usize)>) {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("%%"));
    let Some(first) = lines.next() else { return };
    if !(first.starts_with("graph") || first.starts_with("flowchart")) {
        return;
    }
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    let node = |tok: &str, labels: &mut BTreeMap<String, String>| -> String {
        let tok = tok.trim();
        let id_end = tok.find(['[', '(', '{', '>']).unwrap_or(tok.len());
        let id = tok[..id_end].trim().to_string();
        if id_end < tok.len() {
            let label = tok[id_end..]
                .trim_matches(|c| "[](){}>\"' ".contains(c))
                .to_string();
            labels.insert(id.clone(), label);
        }
        id
    };
    for l in lines {
        if [
            "subgraph",
            "end",
            "classdef",
            "class ",
            "style",
            "click",
            "linkstyle",
            "direction",
        ]
        .iter()
        .any(|k| l.to_lowercase().starts_with(k))
        {
            continue;
        }
        // Drop edge labels (`-->|text|`) before splitting on arrows.
        let mut norm = String::new();
        let mut in_label = false;
        for ch in l.chars() {
            if ch == '|' {
                in_label = !in_label;
            } else if !in_label {
                norm.push(ch);
            }
        }
        for a in ["-.->", "==>", "-->", "---", "--o", "--x", "->"] {
            norm = norm.replace(a, "\u{1}");
        }
        let toks: Vec<String> = norm
            .split('\u{1}')
            .map(|t| node(t.trim_end_matches(';'), &mut labels))
            .collect();
        if toks.len() < 2 {
            continue;
        }
        let resolve = |id: &str, labels: &BTreeMap<String, String>| -> Option<usize> {
            let by_id = id.to_lowercase();
            names
                .iter()
                .position(|n| {
                    *n == by_id || n.replace(['-', ' '], "_") == by_id.replace(['-', ' '], "_")
                })
                .or_else(|| {
                    labels
                        .get(id)
                        .and_then(|l| names.iter().position(|n| *n == l.to_lowercase()))
                })
        };
        for w in toks.windows(2) {
            if let (Some(from), Some(to)) = (resolve(&w[0], &labels), resolve(&w[1], &labels)) {
                if from != to {
                    edges.insert((to, from));
                }
            }
        }
    }
}

/// Dependencies as unit indices (names are unique and known by now).
fn dep_indices(units: &[WorkUnit]) -> Vec<Vec<usize>> {
    let at: HashMap<&str, usize> = units
        .iter()
        .enumerate()
        .map(|(i, u)| (u.name.as_str(), i))
        .collect();
    units
        .iter()
        .map(|u| {
            u.depends_on
                .iter()
                .filter_map(|d| at.get(d.as_str()).copied())
                .collect()
        })
        .collect()
}

fn find_cycle(units: &[WorkUnit]) -> Option<Vec<String>> {
    let deps = dep_indices(units);
    // Iterative depth-first search: 0 unseen, 1 on the stack, 2 done.
    let mut state = vec![0u8; units.len()];
    for root in 0..units.len() {
        if state[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        state[root] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&j) = deps[node].get(*next) {
                *next += 1;
                match state[j] {
                    1 => {
                        let from = stack.iter().position(|(k, _)| *k == j).unwrap_or(0);
                        let mut cycle: Vec<String> = stack[from..]
                            .iter()
                            .map(|(k, _)| units[*k].name.clone())
                            .collect();
                        cycle.push(units[j].name.clone());
                        return Some(cycle);
                    }
                    0 => {
                        state[j] = 1;
                        stack.push((j, 0));
                    }
                    _ => {}
                }
            } else {
                state[node] = 2;
                stack.pop();
            }
        }
    }
    None
}

/// Without declared layers, a unit's layer is its depth in the dependency graph.
fn assign_depths(units: &mut [WorkUnit]) {
    let deps = dep_indices(units);
    let mut depth: Vec<Option<u32>> = vec![None; units.len()];
    fn visit(i: usize, deps: &[Vec<usize>], depth: &mut Vec<Option<u32>>) -> u32 {
        if let Some(d) = depth[i] {
            return d;
        }
        depth[i] = Some(0); // acyclic by now; this only guards against surprises
        let d = deps[i]
            .iter()
            .map(|&j| visit(j, deps, depth) + 1)
            .max()
            .unwrap_or(0);
        depth[i] = Some(d);
        d
    }
    for (i, unit) in units.iter_mut().enumerate() {
        unit.layer = visit(i, &deps, &mut depth);
    }
}

/// §2e: the plan's own prompt template, if it has one.
fn dispatch_template(doc: &Doc, o: &Outline) -> Option<DispatchTemplate> {
    let blocks = &doc.blocks;
    for (i, b) in blocks.iter().enumerate() {
        let Some((_, text)) = b.heading() else {
            continue;
        };
        let t = plain(text).to_lowercase();
        let named = t.starts_with("appendix d")
            || [
                "dispatch template",
                "sprint prompt template",
                "agent prompt",
                "prompt template",
            ]
            .iter()
            .any(|k| t.contains(k));
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
                variables: super::template::variables(&text),
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
                            variables: super::template::variables(&body),
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

/// The number that opens the last heading above `line` (`8` in `## 8. Parser
/// sprints`, `8.2` in `### Section 8.2 — Tasks`), if any.
fn section_number(blocks: &[Block], line: usize) -> Option<String> {
    blocks
        .iter()
        .take_while(|b| b.line() < line)
        .filter_map(|b| b.heading())
        .filter_map(|(_, text)| {
            let t = plain(text);
            let t = t.trim();
            let t = t.strip_prefix("Section ").unwrap_or(t);
            let n: String = t
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let n = n.trim_end_matches('.');
            (!n.is_empty() && n.starts_with(|c: char| c.is_ascii_digit())).then(|| n.to_string())
        })
        .last()
}

/// §2f: progress, to-do, status and config files the plan mentions.
fn referenced_files(blocks: &[Block], units: &[WorkUnit]) -> Vec<ReferencedFile> {
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
    let with_dirs: Vec<&WorkUnit> = units
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

fn file_role(tok: &str) -> Option<(FileRole, bool)> {
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
