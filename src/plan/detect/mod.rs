//! The detection heuristics of §2a–§2g, applied in the specification's priority order
//! to the block list of a parsed document.

use super::blocks::{plain, Block, Doc};
use super::model::*;
use crate::text::{contains_word, nearest};
use aho_corasick::AhoCorasick;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;

mod criteria;
mod dependencies;
mod files;
mod outline;
mod sprints;
mod units;
mod unread;

use criteria::*;
use dependencies::*;
use files::*;
use outline::*;
pub(super) use sprints::sprint_heading;
use sprints::*;
use units::*;

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

    let threads = crate::plan::parallel::threads_for(doc.source.len());
    let o = Outline::new(blocks, threads);
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
        let listed = Regions::of(drafts.iter().filter_map(|d| d.region.clone()));
        for c in section_units(blocks, &o).unwrap_or_default() {
            let Some(r) = &c.region else { continue };
            if !listed.overlap(r) {
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
    let numbers = SectionNumbers::of(blocks);
    // Each unit's sprints are read from its own region, and the dependencies
    // between units from the whole: in parallel for a large plan (they are
    // most of the time of reading one).
    let (
        found,
        (
            explicit,
            dependency_errors,
            dependency_warnings,
            dispatch_template,
            referenced_files,
            checks,
        ),
    ) = crate::plan::parallel::map_beside(
        &drafts,
        threads,
        |d| {
            let sprints = match &d.region {
                Some(r) => find_sprints(doc, &o, r.clone()),
                None => Vec::new(),
            };
            let (mut errors, mut warnings) = (Vec::new(), Vec::new());
            let sprints = order_sprints(sprints, &d.name, &mut errors, &mut warnings);
            (sprints, errors, warnings)
        },
        || {
            let (mut errors, mut warnings) = (Vec::new(), Vec::new());
            let edges = dependencies(doc, &drafts, &mut errors, &mut warnings);
            let template = dispatch_template(doc, &o);
            let files = referenced_files(blocks, &drafts);
            (
                edges,
                errors,
                warnings,
                template,
                files,
                plan_checks(doc, &o),
            )
        },
    );
    for (d, (sprints, order_errors, order_warnings)) in drafts.iter_mut().zip(found) {
        if sprints.is_empty() {
            errors.push(
                Problem::new(d.line, format!("work unit `{}` has no sprints", d.name)).hint(
                    "define them under a section named after the unit, as `### Sprint 1: <name>` headers, a sprint table, `### Task 1.1:` headers or checklists",
                ),
            );
        }
        errors.extend(order_errors);
        warnings.extend(order_warnings);
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
        let section = sprints.first().and_then(|s| numbers.above(s.line));
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

    apply_plan_checks(checks, &mut units);

    let has_layers = drafts.iter().any(|d| d.layer.is_some());
    errors.extend(dependency_errors);
    warnings.extend(dependency_warnings);
    let has_edges = !explicit.is_empty();
    // The edges are ordered by dependent: each unit's are one run of them.
    let mut edges = explicit.iter().peekable();
    for (i, u) in units.iter_mut().enumerate() {
        let mut deps: Vec<String> = Vec::new();
        while let Some((_, to)) = edges.next_if(|(from, _)| *from <= i) {
            deps.push(drafts[*to].name.clone());
        }
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
    // Read from the names once, for the cycle check and the depths.
    let graph = UnitGraph::of(&units);
    if let Some(cycle) = find_cycle(&units, &graph) {
        let line = units
            .iter()
            .find(|u| u.name == cycle[0])
            .map_or(1, |u| u.line);
        errors.push(
            Problem::new(line, format!("dependency cycle: {}", cycle.join(" → ")))
                .hint("a unit cannot wait for itself; remove one of these dependencies"),
        );
    } else if !has_layers {
        assign_depths(&mut units, &graph);
    }

    unread::unread(doc, &mut errors, &mut warnings);
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

/// Block ranges, asked whether any of them overlaps a given one: sorted by
/// start, with the furthest end reached so far, so that a range overlaps one
/// iff among those starting before its end the furthest end passes its
/// start. (Asking every unit's region about every section took 13 s for a
/// table of 100,000 units.)
struct Regions {
    spans: Vec<(usize, usize)>,
    reach: Vec<usize>,
}

impl Regions {
    fn of(ranges: impl Iterator<Item = Range<usize>>) -> Regions {
        let mut spans: Vec<(usize, usize)> = ranges.map(|r| (r.start, r.end)).collect();
        spans.sort_unstable();
        let reach = spans
            .iter()
            .scan(0, |far, &(_, end)| {
                *far = end.max(*far);
                Some(*far)
            })
            .collect();
        Regions { spans, reach }
    }

    fn overlap(&self, r: &Range<usize>) -> bool {
        let before_end = self.spans.partition_point(|&(start, _)| start < r.end);
        before_end > 0 && self.reach[before_end - 1] > r.start
    }
}

#[cfg(test)]
mod tests {
    use super::Regions;
    use proptest::prelude::*;

    proptest! {
        /// `Regions::overlap` is "some region shares a block with it",
        /// asked of every region in turn, as the reader asked it before.
        #[test]
        fn regions_overlap_exactly_when_some_region_shares_a_block(
            regions in prop::collection::vec((0usize..40, 0usize..8), 0..12),
            asked in (0usize..40, 0usize..8),
        ) {
            let regions: Vec<std::ops::Range<usize>> = regions.into_iter().map(|(s, l)| s..s + l).collect();
            let asked = asked.0..asked.0 + asked.1;
            let expected = regions.iter().any(|r| r.start < asked.end && asked.start < r.end);
            prop_assert_eq!(Regions::of(regions.iter().cloned()).overlap(&asked), expected);
        }
    }
}
