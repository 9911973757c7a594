//! The rewrites of §16g and §17g: the plan's own text with the tools' changes
//! spliced in. A rewrite owns only what it changes — a sprint's heading number,
//! its `**Priority**:` line, the criteria and tasks it moves or replaces, a
//! table cell — and copies every other line (prose, code blocks, links, front
//! matter, other sections) byte for byte. Sprints it cannot place line by line
//! (a sprint defined in a table, a task it cannot find) keep their text.

mod layout;

use super::evaluate::{evaluate, Fitness};
use super::measure::{file_names, is_vague};
use super::prioritize::prioritize;
use crate::plan::{Plan, Sprint, SprintType};
use layout::{
    ending, item_text, renumber_heading, renumber_refs, replace_sprint_ref, Layout, Line, Role,
    Section,
};
use serde::Serialize;
use std::collections::HashMap;
use std::fmt::Write as _;

/// What a rewrite did, for the summary and the pull request's body.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Rewrite {
    pub text: String,
    pub sprints_before: usize,
    pub sprints_after: usize,
    pub splits: usize,
    pub merges: usize,
    /// Exit criteria replaced or added.
    pub criteria_fixed: usize,
    pub annotated: usize,
    pub layer_changes: Vec<String>,
    /// One line per change, for people.
    pub changes: Vec<String>,
}

/// The test command for a unit's sprints: the unit's own; else one another
/// unit uses that is not scoped to that unit (`cargo test -p core` is
/// core's, never api's); else the usual one for the language of the files
/// the unit's tasks (or, failing them, the plan's) name.
fn unit_command(plan: &Plan, u: usize) -> Option<String> {
    let is_check = |c: &String| c.contains("test") || c.contains("build") || c.contains("check");
    let commands = |w: &crate::plan::WorkUnit| -> Vec<String> {
        w.sprints
            .iter()
            .flat_map(|s| &s.exit_criteria)
            .filter_map(|c| c.command.clone())
            .filter(is_check)
            .collect()
    };
    let unit = &plan.work_units[u];
    if let Some(c) = commands(unit).into_iter().next() {
        return Some(c);
    }
    if let Some(c) = plan
        .work_units
        .iter()
        .filter(|w| w.name != unit.name)
        .flat_map(|w| commands(w).into_iter().filter(move |c| !scoped_to(c, w)))
        .next()
    {
        return Some(c);
    }
    let files_of = |units: &mut dyn Iterator<Item = &crate::plan::WorkUnit>| -> Vec<String> {
        units
            .flat_map(|w| &w.sprints)
            .flat_map(|s| s.tasks.iter().flat_map(|t| file_names(t)))
            .map(str::to_string)
            .collect()
    };
    let mut files = files_of(&mut std::iter::once(unit));
    if files.is_empty() {
        files = files_of(&mut plan.work_units.iter());
    }
    let any = |ext: &[&str]| files.iter().any(|f| ext.iter().any(|e| f.ends_with(e)));
    if any(&[".rs"]) {
        Some("cargo test".into())
    } else if any(&[".ts", ".tsx", ".js", ".mjs"]) {
        Some("npm test".into())
    } else if any(&[".py"]) {
        Some("pytest".into())
    } else if any(&[".go"]) {
        Some("go test ./...".into())
    } else {
        None
    }
}

/// Whether a command names a unit (its name or its directory as a word, or
/// a path in its directory): it checks that unit, not another.
fn scoped_to(cmd: &str, unit: &crate::plan::WorkUnit) -> bool {
    let name = unit.name.to_lowercase();
    let dir = unit
        .directory
        .as_deref()
        .map(|d| d.trim_matches('/').to_lowercase())
        .filter(|d| !d.is_empty() && d != ".");
    cmd.to_lowercase()
        .split(|c: char| c.is_whitespace() || c == '=' || c == ':')
        .map(|w| w.trim_matches(['\'', '"', '`']))
        .any(|w| {
            w == name
                || dir.as_deref().is_some_and(|d| {
                    w == d || w.trim_start_matches("./").starts_with(&format!("{d}/"))
                })
        })
}

/// Whether a build or test command belongs to the language of the files a
/// sprint names (any command fits a sprint that names none).
fn fits(cmd: &str, s: &Sprint) -> bool {
    let files: Vec<&str> = s.tasks.iter().flat_map(|t| file_names(t)).collect();
    if files.is_empty() {
        return true;
    }
    let langs: &[(&str, &[&str])] = &[
        ("cargo", &[".rs", ".toml"]),
        (
            "npm",
            &[".ts", ".tsx", ".js", ".mjs", ".json", ".html", ".css"],
        ),
        (
            "pnpm",
            &[".ts", ".tsx", ".js", ".mjs", ".json", ".html", ".css"],
        ),
        (
            "yarn",
            &[".ts", ".tsx", ".js", ".mjs", ".json", ".html", ".css"],
        ),
        ("pytest", &[".py"]),
        ("go ", &[".go"]),
    ];
    match langs.iter().find(|(tool, _)| cmd.starts_with(tool)) {
        Some((_, exts)) => files.iter().any(|f| exts.iter().any(|e| f.ends_with(e))),
        None => true,
    }
}

/// Files a sprint's tasks create (create, add, write, new).
fn created_files(s: &Sprint) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in &s.tasks {
        let lt = t.to_lowercase();
        if ["create", "add", "write", "new "]
            .iter()
            .any(|w| lt.contains(w))
        {
            for f in file_names(t) {
                if !out.iter().any(|x| x == f) {
                    out.push(f.to_string());
                }
            }
        }
    }
    out
}

fn criterion_line(indent_from: &str, text: &str, end: &str) -> String {
    let indent: String = indent_from
        .chars()
        .take_while(|c| c.is_whitespace() && *c != '\n')
        .collect();
    format!("{indent}- [ ] {text}{end}")
}

/// §17f's criterion fixes on one section: vague wording replaced with a
/// command or a file check, and a machine check added where there is none.
fn fix_criteria(
    s: &Sprint,
    sec: &mut Section,
    cmd: Option<&str>,
    changes: &mut Vec<String>,
    unit: &str,
) -> usize {
    let mut fixed = 0;
    let files = created_files(s);
    // The plan's command fits a sprint whose files are in its language (or
    // that names none); otherwise a file the sprint makes is the check.
    let cmd = cmd.filter(|c| fits(c, s));
    let present = |sec: &Section, text: &str| {
        sec.lines
            .iter()
            .any(|l| l.role == Role::Exit && l.text.contains(text))
    };
    let cmd_check = cmd.map(|c| format!("`{c}` passes"));
    let mut unused_files: Vec<String> = files
        .iter()
        .map(|f| format!("`{f}` exists"))
        .filter(|c| !present(sec, c))
        .collect();
    let mut cmd_free = cmd_check.clone().filter(|c| !present(sec, c));
    // §17f: "works correctly" → the test command; "is complete" → a file the
    // sprint makes; a vague line a check already there covers just goes.
    let mut replace: Vec<(usize, Option<String>)> = Vec::new();
    for (i, l) in sec.lines.iter().enumerate() {
        if l.role != Role::Exit {
            continue;
        }
        let Some(text) = item_text(&l.text).filter(|t| is_vague(t)) else {
            continue;
        };
        let lower = text.to_lowercase();
        let completion = lower.contains("complete") || lower.contains("is done");
        let check = if completion {
            (!unused_files.is_empty())
                .then(|| unused_files.remove(0))
                .or_else(|| cmd_free.take())
        } else {
            let covered = cmd_check.as_ref().is_some_and(|c| present(sec, c));
            if covered {
                None
            } else {
                cmd_free
                    .take()
                    .or_else(|| (!unused_files.is_empty()).then(|| unused_files.remove(0)))
            }
        };
        match &check {
            Some(c) => changes.push(format!("{unit} Sprint {}: \"{text}\" → {c}", s.id)),
            None => changes.push(format!(
                "{unit} Sprint {}: \"{text}\" removed (the sprint's other checks cover it)",
                s.id
            )),
        }
        replace.push((i, check));
        fixed += 1;
    }
    let exits = sec.lines.iter().filter(|l| l.role == Role::Exit).count();
    let mut removed = 0;
    for (i, check) in replace.into_iter().rev() {
        match check {
            Some(c) => {
                let end = ending(&sec.lines[i].text).to_string();
                sec.lines[i].text = criterion_line(&sec.lines[i].text, &c, &end);
            }
            // Never the last exit criterion: a sprint keeps at least one.
            None if exits - removed > 1 => {
                sec.lines.remove(i);
                removed += 1;
            }
            None => {}
        }
    }
    if !s.exit_criteria.iter().any(|c| c.is_machine_checkable()) {
        let mut add: Vec<String> = files
            .iter()
            .take(3)
            .map(|f| format!("`{f}` exists"))
            .collect();
        if let Some(c) = cmd {
            add.push(format!("`{c}` passes"));
        }
        let present: String = sec.lines.iter().map(|l| l.text.as_str()).collect();
        add.retain(|a| !present.contains(a.as_str()));
        if !add.is_empty() {
            let end = ending(&sec.lines[0].text).to_string();
            let at = sec.lines.iter().rposition(|l| l.role == Role::Exit);
            let new: Vec<Line> = add
                .iter()
                .map(|a| {
                    Line::new(
                        criterion_line(at.map_or("", |i| sec.lines[i].text.as_str()), a, &end),
                        Role::Exit,
                    )
                })
                .collect();
            changes.push(format!("{unit} Sprint {}: added {}", s.id, add.join(", ")));
            fixed += new.len();
            match at {
                Some(i) => {
                    sec.lines.splice(i + 1..i + 1, new);
                }
                None => {
                    // No exit criteria at all: a block of its own, before the
                    // blank lines that end the section.
                    let i = sec
                        .lines
                        .iter()
                        .rposition(|l| !l.text.trim().is_empty())
                        .map_or(sec.lines.len(), |i| i + 1);
                    let mut block = vec![
                        Line::new(end.clone(), Role::Other),
                        Line::new(format!("**Exit criteria**:{end}"), Role::Other),
                    ];
                    block.extend(new);
                    sec.lines.splice(i..i, block);
                }
            }
        }
    }
    fixed
}

/// §17f–§17g: the evaluated plan's fixes applied to its text.
pub fn evaluated(plan: &Plan, source: &str, max_turns: u32) -> Rewrite {
    let ev = evaluate(plan, max_turns);
    let layout = Layout::new(plan, source);
    let mut rw = Rewrite {
        sprints_before: plan.work_units.iter().map(|u| u.sprints.len()).sum(),
        ..Rewrite::default()
    };
    // Per line of the source: what replaces it (a section is emitted at its
    // first line; its other lines are skipped).
    let mut emit: Vec<Option<String>> = layout.lines.iter().map(|l| Some(l.clone())).collect();
    let mut k = 0;
    for (u, unit) in plan.work_units.iter().enumerate() {
        // Sprints are moved only in a unit whose sections follow one another
        // with nothing between them (then the unit's text is one piece).
        let contiguous = layout.ranges[u].iter().all(Option::is_some)
            && layout.ranges[u]
                .windows(2)
                .all(|w| matches!((w[0], w[1]), (Some(a), Some(b)) if a.1 == b.0));
        let numeric = contiguous
            && unit
                .sprints
                .iter()
                .all(|s| s.id.as_str().parse::<usize>().is_ok());
        let cmd = unit_command(plan, u);
        let checks = &ev.sprints[k..k + unit.sprints.len()];
        k += unit.sprints.len();
        let sections: Vec<Option<Section>> = unit
            .sprints
            .iter()
            .zip(&layout.ranges[u])
            .map(|(s, r)| r.map(|r| layout.section(s, r)))
            .collect();
        // The unit's new sprints: (the old sprint whose exit criteria it ends
        // with, its lines).
        let mut out: Vec<(usize, Vec<Line>)> = Vec::new();
        let mut i = 0;
        while i < unit.sprints.len() {
            let s = &unit.sprints[i];
            let Some(mut sec) = sections[i].clone() else {
                i += 1;
                continue;
            };
            rw.criteria_fixed +=
                fix_criteria(s, &mut sec, cmd.as_deref(), &mut rw.changes, &unit.name);
            // Sprints are split and merged only where the result means the
            // same: code sprints whose tasks and criteria are list items here.
            let shaped = |s: &Sprint, sec: &Section| {
                sec.placed
                    && s.kind == SprintType::Code
                    && heading_number(&sec.lines[0].text).as_deref() == Some(s.id.as_str())
                    && sec.lines.iter().any(|l| l.role == Role::Task)
                    && sec.lines.iter().any(|l| l.role == Role::Exit)
            };
            let structural = numeric && shaped(s, &sec);
            let next_placed = sections
                .get(i + 1)
                .and_then(|n| n.as_ref())
                .zip(unit.sprints.get(i + 1))
                .is_some_and(|(n, ns)| shaped(ns, n));
            let by_concern = (structural && !checks[i].single_concern)
                .then(|| concerns(s))
                .flatten();
            if let Some((groups, labels)) = by_concern {
                rw.splits += 1;
                rw.changes.push(format!(
                    "{} Sprint {}: split by concern into {} sprints ({})",
                    unit.name,
                    s.id,
                    groups.len(),
                    labels.join(", ")
                ));
                let parts = split(s, &sec, &groups, &labels);
                let last = parts.len() - 1;
                for (k, part) in parts.into_iter().enumerate() {
                    out.push((if k == last { i } else { usize::MAX }, part));
                }
                i += 1;
            } else if structural && checks[i].fitness == Fitness::Oversized && s.tasks.len() >= 2 {
                let half = s.tasks.len().div_ceil(2);
                let groups = vec![(0..half).collect(), (half..s.tasks.len()).collect()];
                let parts = split(s, &sec, &groups, &["first part".into(), "part 2".into()]);
                rw.splits += 1;
                rw.changes.push(format!(
                    "{} Sprint {}: split in two ({} turns estimated, over 80% of {max_turns})",
                    unit.name, s.id, checks[i].estimated_turns
                ));
                let mut parts = parts.into_iter();
                out.push((usize::MAX, parts.next().unwrap_or_default()));
                out.push((i, parts.next().unwrap_or_default()));
                i += 1;
            } else if structural
                && checks[i].fitness == Fitness::Undersized
                && next_placed
                && i + 1 < unit.sprints.len()
            {
                let mut next = sections[i + 1].clone().unwrap();
                rw.criteria_fixed += fix_criteria(
                    &unit.sprints[i + 1],
                    &mut next,
                    cmd.as_deref(),
                    &mut rw.changes,
                    &unit.name,
                );
                rw.merges += 1;
                rw.changes.push(format!(
                    "{} Sprint {}: merged into Sprint {} ({} turns estimated, under 15% of {max_turns})",
                    unit.name, s.id, unit.sprints[i + 1].id, checks[i].estimated_turns
                ));
                out.push((i + 1, merge(s.id.as_str(), &sec, next)));
                // The merged sprint also ends with the first one's criteria.
                out.last_mut().unwrap().0 = i + 1;
                i += 2;
            } else {
                out.push((i, sec.lines));
                i += 1;
            }
        }
        // Renumber: each old sprint's number maps to the new sprint that ends
        // with its exit criteria (a merged sprint's first half: the merged one).
        let mut map: Vec<(String, usize)> = Vec::new();
        for (new, (old, _)) in out.iter().enumerate() {
            if *old != usize::MAX {
                map.push((unit.sprints[*old].id.as_str().to_string(), new + 1));
            }
        }
        for (j, s) in unit.sprints.iter().enumerate() {
            if !map.iter().any(|(o, _)| o == s.id.as_str()) {
                // Merged away: its criteria now end the next new sprint.
                if let Some((_, n)) = map
                    .iter()
                    .find(|(o, _)| *o == unit.sprints.get(j + 1).map_or("", |x| x.id.as_str()))
                {
                    map.push((s.id.as_str().to_string(), *n));
                }
            }
        }
        let mut texts: Vec<String> = Vec::new();
        for (new, (_, lines)) in out.iter().enumerate() {
            let mut text = String::new();
            for (n, l) in lines.iter().enumerate() {
                if n == 0 && numeric {
                    let old = heading_number(&l.text).unwrap_or_default();
                    text.push_str(&renumber_heading(&l.text, &old, new + 1));
                } else if l.role == Role::Entry && numeric {
                    text.push_str(&renumber_refs(&l.text, &map));
                } else if l.role == Role::EntryPrevious {
                    text.push_str(&l.text.replace("{previous}", &new.to_string()));
                } else {
                    text.push_str(&l.text);
                }
            }
            texts.push(text);
        }
        let placed: Vec<(usize, usize)> = layout.ranges[u].iter().flatten().copied().collect();
        for (a, b) in &placed {
            for e in emit.iter_mut().take(*b).skip(*a) {
                *e = None;
            }
        }
        if contiguous {
            // One piece: the unit's new sections where its first one was.
            if let Some(first) = placed.first() {
                emit[first.0] = Some(texts.concat());
            }
        } else {
            // Nothing moved: each section where it was.
            let own = unit
                .sprints
                .iter()
                .zip(&layout.ranges[u])
                .filter_map(|(_, r)| *r);
            for ((a, _), text) in own.zip(texts) {
                emit[a] = Some(text);
            }
        }
        if out.len() != unit.sprints.len() {
            set_sprint_count(&mut emit, &layout, plan, u, out.len());
        }
        rw.sprints_after += out.len() + sections.iter().filter(|s| s.is_none()).count();
    }
    rw.text = emit.into_iter().flatten().collect();
    rw
}

fn heading_number(line: &str) -> Option<String> {
    let i = line.find("Sprint ")?;
    let n: String = line[i + 7..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    (!n.is_empty()).then_some(n)
}

/// A sprint in parts, `groups` holding each part's task indices (in order,
/// every task once): the first part keeps the heading, entry criteria and
/// prose and ends with its own files (or its tasks done); each later part
/// starts from the part before it; the last ends with the original criteria.
/// Halves for an oversized sprint, one part per concern for a sprint whose
/// tasks span unrelated places.
fn split(s: &Sprint, sec: &Section, groups: &[Vec<usize>], labels: &[String]) -> Vec<Vec<Line>> {
    let end = ending(&sec.lines[0].text).to_string();
    let part_of = |task: usize| groups.iter().position(|g| g.contains(&task)).unwrap_or(0);
    let own_checks = |g: &[usize], like: &str| -> Vec<Line> {
        let files: Vec<String> = g
            .iter()
            .flat_map(|&t| file_names(&s.tasks[t]).map(str::to_string))
            .take(3)
            .collect();
        let checks: Vec<String> = if files.is_empty() {
            let numbers: Vec<String> = g.iter().map(|t| (t + 1).to_string()).collect();
            vec![format!(
                "Tasks {} of \"{}\" are done and committed",
                numbers.join(", "),
                s.name
            )]
        } else {
            files.iter().map(|f| format!("`{f}` exists")).collect()
        };
        checks
            .iter()
            .map(|c| Line::new(criterion_line(like, c, &end), Role::Exit))
            .collect()
    };
    let exits = sec.having(Role::Exit);
    let mut parts: Vec<Vec<Line>> = vec![Vec::new(); groups.len()];
    let mut later: Vec<Vec<Line>> = vec![Vec::new(); groups.len()];
    // The first part: every line but the other parts' tasks, with its own
    // exit criteria where the original's first one was.
    let mut task = 0;
    let mut exits_placed = false;
    for l in &sec.lines {
        match l.role {
            Role::Task => {
                let p = part_of(task);
                task += 1;
                if p == 0 {
                    parts[0].push(l.clone());
                } else {
                    later[p].push(l.clone());
                }
            }
            Role::Exit => {
                if !exits_placed {
                    parts[0].extend(own_checks(&groups[0], &l.text));
                    exits_placed = true;
                }
            }
            _ => parts[0].push(l.clone()),
        }
    }
    if !exits_placed {
        parts[0].push(Line::new(
            format!("{end}**Exit criteria**:{end}"),
            Role::Other,
        ));
        parts[0].extend(own_checks(&groups[0], ""));
    }
    let heading = sec.lines[0].text.trim_end();
    let marks = heading.chars().take_while(|c| *c == '#').count();
    for p in 1..groups.len() {
        let name = format!("{} — {}", s.name, labels[p]);
        let mut b = vec![
            Line::new(
                format!("{} Sprint {}: {name}{end}", "#".repeat(marks), s.id),
                Role::Heading,
            ),
            Line::new(end.clone(), Role::Other),
            Line::new(format!("**Entry criteria**:{end}"), Role::Other),
            Line::new(
                format!("- [ ] Sprint {{previous}} exit criteria met{end}"),
                Role::EntryPrevious,
            ),
            Line::new(end.clone(), Role::Other),
            Line::new(format!("**Tasks**:{end}"), Role::Other),
        ];
        for t in &later[p] {
            let text = item_text(&t.text).unwrap_or("").to_string();
            b.push(Line::new(format!("- {text}{end}"), Role::Task));
        }
        b.push(Line::new(end.clone(), Role::Other));
        b.push(Line::new(format!("**Exit criteria**:{end}"), Role::Other));
        if p + 1 == groups.len() {
            b.extend(exits.iter().cloned());
        } else {
            b.extend(own_checks(&groups[p], ""));
        }
        b.push(Line::new(end.clone(), Role::Other));
        parts[p] = b;
    }
    parts
}

/// §17f "split by concern": the tasks grouped by the top-level place their
/// files are in (a task naming none goes with the one before it), if that
/// makes two or more groups; each group's label names its place.
fn concerns(s: &Sprint) -> Option<(Vec<Vec<usize>>, Vec<String>)> {
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, t) in s.tasks.iter().enumerate() {
        let area = file_names(t).find_map(|f| f.split_once('/').map(|x| x.0.to_string()));
        match area {
            Some(a) => match groups.iter_mut().find(|(g, _)| *g == a) {
                Some((_, v)) => v.push(i),
                None => groups.push((a, vec![i])),
            },
            None => match groups.last_mut() {
                Some((_, v)) => v.push(i),
                None => groups.push((String::new(), vec![i])),
            },
        }
    }
    // Tasks before the first named place belong to the first group.
    if groups.len() > 1 && groups[0].0.is_empty() {
        let head = groups.remove(0).1;
        let mut first = head;
        first.extend(groups[0].1.iter().copied());
        groups[0].1 = first;
    }
    (groups.len() >= 2).then(|| {
        let labels = groups.iter().map(|(a, _)| format!("{a}/")).collect();
        (groups.into_iter().map(|(_, v)| v).collect(), labels)
    })
}

/// An undersized sprint merged forward: the next sprint keeps its heading and
/// entry criteria, takes the first one's tasks before its own, and ends with
/// both sets of exit criteria; the first one's prose comes along after the
/// heading.
fn merge(first_id: &str, first: &Section, next: Section) -> Vec<Line> {
    let tasks: Vec<Line> = first.having(Role::Task);
    let first_entries: Vec<Line> = first.having(Role::Entry);
    let prose: Vec<Line> = first
        .lines
        .iter()
        .skip(1)
        .filter(|l| l.role == Role::Other && !l.text.trim().is_empty() && !is_label(&l.text))
        .cloned()
        .collect();
    let exits: Vec<Line> = first.having(Role::Exit);
    let mut lines = next.lines;
    // "Sprint <first> exit criteria met" would now point at itself: the
    // merged sprint starts from what the first one started from.
    let refers = |l: &Line| {
        l.role == Role::Entry && replace_sprint_ref(&l.text, first_id, "\u{0}") != l.text
    };
    if let Some(at) = lines.iter().position(refers) {
        lines.retain(|l| !refers(l));
        if first_entries.is_empty() && !lines.iter().any(|l| l.role == Role::Entry) {
            // No entry criteria left: their label goes too (with its blank).
            if let Some(label) = lines.iter().position(|l| {
                l.role == Role::Other && l.text.trim().to_lowercase().starts_with("**entry")
            }) {
                let blank = lines
                    .get(label + 1)
                    .is_some_and(|l| l.text.trim().is_empty());
                lines.drain(label..label + 1 + usize::from(blank));
            }
        } else {
            lines.splice(at..at, first_entries);
        }
    }
    let existing: Vec<String> = lines
        .iter()
        .filter(|l| l.role == Role::Exit)
        .map(|l| l.text.trim().to_string())
        .collect();
    let exits: Vec<Line> = exits
        .into_iter()
        .filter(|e| !existing.contains(&e.text.trim().to_string()))
        .collect();
    let task_at = lines
        .iter()
        .position(|l| l.role == Role::Task)
        .unwrap_or(lines.len());
    lines.splice(task_at..task_at, tasks);
    let exit_at = lines
        .iter()
        .rposition(|l| l.role == Role::Exit)
        .map_or(lines.len(), |i| i + 1);
    lines.splice(exit_at..exit_at, exits);
    if !prose.is_empty() {
        let end = ending(&lines[0].text).to_string();
        let mut p = vec![Line::new(end.clone(), Role::Other)];
        p.extend(prose);
        lines.splice(1..1, p);
    }
    number_tasks_alike(&mut lines);
    lines
}

/// Task lines that came from another sprint take the numbering of the ones
/// they joined (`1.` … or `-`), so the tasks stay one list.
fn number_tasks_alike(lines: &mut [Line]) {
    let numbered = lines.iter().filter(|l| l.role == Role::Task).any(|l| {
        l.text
            .trim_start()
            .starts_with(|c: char| c.is_ascii_digit())
    });
    let mut n = 0;
    for l in lines.iter_mut().filter(|l| l.role == Role::Task) {
        n += 1;
        let Some(text) = item_text(&l.text).map(str::to_string) else {
            continue;
        };
        let indent: String = l
            .text
            .chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .collect();
        let end = ending(&l.text).to_string();
        l.text = if numbered {
            format!("{indent}{n}. {text}{end}")
        } else {
            format!("{indent}- {text}{end}")
        };
    }
}

fn is_label(line: &str) -> bool {
    let t = line.trim().to_lowercase();
    t.starts_with("**tasks")
        || t.starts_with("**entry")
        || t.starts_with("**exit")
        || t.starts_with("**priority")
}

/// The unit's row in the Work Units table gets its new sprint count, if the
/// table has a Sprints column.
fn set_sprint_count(emit: &mut [Option<String>], layout: &Layout, plan: &Plan, u: usize, n: usize) {
    let row = unit_row(layout, &plan.work_units[u]);
    set_cell(emit, layout, row, "sprints", &n.to_string());
}

/// The 1-based line of the unit's row in a table of units: where the unit
/// was read, when that is a table row; else the first table row whose first
/// cell names it (a unit read from its heading that the table lists too).
fn unit_row(layout: &Layout, unit: &crate::plan::WorkUnit) -> usize {
    let is_row = |l: &str| l.trim_start().starts_with('|');
    if layout
        .lines
        .get(unit.line.wrapping_sub(1))
        .is_some_and(|l| is_row(l))
    {
        return unit.line;
    }
    let name = unit.name.to_lowercase();
    layout
        .lines
        .iter()
        .position(|l| {
            is_row(l)
                && l.trim()
                    .trim_start_matches('|')
                    .split('|')
                    .next()
                    .map(|c| c.trim().trim_matches(['`', '*', '[', ']']).to_lowercase())
                    .is_some_and(|c| c == name)
        })
        .map_or(unit.line, |i| i + 1)
}

/// The text of the cell under `column` (header text, case-insensitive) in
/// the table row at 1-based `line`, if that line is a table row.
fn cell(layout: &Layout, line: usize, column: &str) -> Option<String> {
    let i = line.checked_sub(1)?;
    let row = layout
        .lines
        .get(i)
        .filter(|r| r.trim_start().starts_with('|'))?;
    let h = (0..i).rev().find(|&h| {
        layout
            .lines
            .get(h + 1)
            .is_some_and(|s| s.trim_start().starts_with('|') && s.contains("---"))
    })?;
    let cells = |r: &str| -> Vec<String> {
        r.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    };
    let col = cells(&layout.lines[h])
        .iter()
        .position(|c| c.to_lowercase().starts_with(column))?;
    cells(row).get(col).cloned()
}

/// Replaces the cell under `column` (header text, case-insensitive) in the
/// table row at 1-based `line`, if that line is a table row.
fn set_cell(
    emit: &mut [Option<String>],
    layout: &Layout,
    line: usize,
    column: &str,
    value: &str,
) -> bool {
    let Some(i) = line.checked_sub(1) else {
        return false;
    };
    let Some(row) = layout
        .lines
        .get(i)
        .filter(|r| r.trim_start().starts_with('|'))
    else {
        return false;
    };
    // The header: the nearest row above that is followed by the |---| line.
    let header = (0..i).rev().find(|&h| {
        layout
            .lines
            .get(h + 1)
            .is_some_and(|s| s.trim_start().starts_with('|') && s.contains("---"))
    });
    let Some(h) = header else { return false };
    let cells = |r: &str| -> Vec<String> {
        r.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_lowercase())
            .collect()
    };
    let Some(col) = cells(&layout.lines[h]).iter().position(|c| c == column) else {
        return false;
    };
    let end = ending(row);
    let body = row.trim_end_matches(['\r', '\n']);
    let mut parts: Vec<String> = body.split('|').map(str::to_string).collect();
    // parts[0] is what precedes the first pipe.
    let Some(cell) = parts.get_mut(col + 1) else {
        return false;
    };
    let pad_left = cell.len() - cell.trim_start().len();
    let pad_right = cell.len() - cell.trim_end().len();
    *cell = format!(
        "{}{value}{}",
        " ".repeat(pad_left.max(1)),
        " ".repeat(pad_right.max(1))
    );
    emit[i] = Some(format!("{}{end}", parts.join("|")));
    true
}

/// §16e–§16g: every sprint with a heading gets its `**Priority**:` line (an
/// existing one is replaced), and a unit whose Layer says more than its
/// explicit dependencies need moves to the earlier layer (§16f). Sprints keep
/// their order inside their unit (§16d's work-unit coherence), so nothing is
/// renumbered; the order across units is the scheduler's, which runs the
/// longest remaining path first.
pub fn prioritized(plan: &Plan, source: &str) -> Rewrite {
    let layout = Layout::new(plan, source);
    let scores = prioritize(plan);
    let mut emit: Vec<Option<String>> = layout.lines.iter().map(|l| Some(l.clone())).collect();
    let mut rw = Rewrite {
        sprints_before: scores.len(),
        sprints_after: scores.len(),
        ..Rewrite::default()
    };
    let mut k = 0;
    for (u, unit) in plan.work_units.iter().enumerate() {
        for (i, _) in unit.sprints.iter().enumerate() {
            let p = &scores[k];
            k += 1;
            let Some((start, end)) = layout.ranges[u][i] else {
                continue;
            };
            let eol = ending(&layout.lines[start]).to_string();
            // The justification leads with the score (§16e's "12.5 — …").
            let line = format!("**Priority**: {}{eol}", p.justification);
            // An existing Priority line in the section is replaced in place.
            if let Some(j) = (start + 1..end)
                .find(|&j| layout.lines[j].trim_start().starts_with("**Priority**:"))
            {
                emit[j] = Some(line);
            } else {
                let heading = emit[start].take().unwrap_or_default();
                // A blank line on each side keeps it a paragraph of its own.
                let after = layout
                    .lines
                    .get(start + 1)
                    .is_some_and(|l| !l.trim().is_empty());
                let gap = if after { eol.as_str() } else { "" };
                emit[start] = Some(format!("{heading}{eol}{line}{gap}"));
            }
            rw.annotated += 1;
        }
    }
    rw.layer_changes = move_layers(plan, source, &layout, &mut emit);
    rw.changes.push(format!(
        "{} annotated with their priority",
        crate::text::count(rw.annotated, "sprint")
    ));
    rw.changes.extend(rw.layer_changes.iter().cloned());
    rw.text = emit.into_iter().flatten().collect();
    rw
}

/// §16f: a unit whose Layer says more than its declared dependencies need
/// moves to the earlier layer: its Layer cell is set in `emit`, and each
/// move is said. Only where the table has both a Layer and a Dependencies
/// column.
fn move_layers(
    plan: &Plan,
    source: &str,
    layout: &Layout,
    emit: &mut [Option<String>],
) -> Vec<String> {
    // §16f: layers from the explicit dependencies, where the table has both.
    // The reader makes every unit wait on the layers below it, so what was
    // declared is read from the table's own cell.
    // Each declared name is matched to the dependency the reader found for
    // it (a short name, another case); one that matches none (`all`, say)
    // leaves the unit where it is.
    let declared = |name: &str| -> Option<Vec<String>> {
        let u = plan.unit(name)?;
        let row = unit_row(layout, u);
        let text = cell(layout, row, "depend").or_else(|| cell(layout, row, "needs"))?;
        text.split([',', ';'])
            .map(|d| d.trim().trim_matches(['`', '*']).to_lowercase())
            .filter(|d| !d.is_empty() && !["none", "-", "—", "–", "n/a"].contains(&d.as_str()))
            .map(|d| {
                u.depends_on
                    .iter()
                    .find(|n| {
                        let n = n.to_lowercase();
                        n == d || n.ends_with(&format!("-{d}")) || n.ends_with(&format!("_{d}"))
                    })
                    .cloned()
            })
            .collect()
    };
    // Depth along declared dependencies (the reader has refused cycles; a
    // name met again on the way down counts as no depth at all).
    let mut known: HashMap<String, Option<u32>> = HashMap::new();
    fn depth(
        name: &str,
        known: &mut HashMap<String, Option<u32>>,
        declared: &dyn Fn(&str) -> Option<Vec<String>>,
    ) -> Option<u32> {
        if let Some(d) = known.get(name) {
            return *d;
        }
        known.insert(name.to_string(), Some(0));
        let found = declared(name).and_then(|deps| {
            deps.iter()
                .map(|d| depth(d, known, declared).map(|x| x + 1))
                .try_fold(0, |m, x| x.map(|x| m.max(x)))
        });
        known.insert(name.to_string(), found);
        found
    }
    let explicit = source.lines().any(|l| {
        let l = l.to_lowercase();
        l.trim_start().starts_with('|')
            && l.contains("layer")
            && (l.contains("depend") || l.contains("needs"))
    });
    let mut moves = Vec::new();
    if !explicit {
        return moves;
    }
    for unit in &plan.work_units {
        let Some(need) = depth(&unit.name, &mut known, &declared) else {
            continue;
        };
        if unit.layer > need
            && set_cell(
                emit,
                layout,
                unit_row(layout, unit),
                "layer",
                &need.to_string(),
            )
        {
            moves.push(format!(
                "{}: layer {} → {need} (its dependencies allow it)",
                unit.name, unit.layer
            ));
        }
    }
    moves
}

/// The §16f moves `prioritized` would make, without the rest of its
/// rewrite (for `analyze`'s missed opportunities).
pub fn layer_moves(plan: &Plan, source: &str) -> Vec<String> {
    let layout = Layout::new(plan, source);
    let mut emit: Vec<Option<String>> = layout.lines.iter().map(|l| Some(l.clone())).collect();
    move_layers(plan, source, &layout, &mut emit)
}

/// §16h's summary.
pub fn prioritize_summary(plan: &Plan, rw: &Rewrite) -> String {
    let mut out = String::from("## Prioritization Complete\n\n| Sprint | Name | Priority | Change |\n|--------|------|----------|--------|\n");
    for p in prioritize(plan) {
        let _ = writeln!(
            out,
            "| {} {} | {} | {:.1} | unchanged |",
            p.unit, p.sprint, p.name, p.priority
        );
    }
    let _ = write!(
        out,
        "\nSprints reordered: 0 (each unit keeps its order; across units the supervisor runs the longest remaining path first)\nLayer adjustments: {}\n\nNext step: supervise plan evaluate\n",
        if rw.layer_changes.is_empty() { "none".to_string() } else { rw.layer_changes.join("; ") }
    );
    out
}

/// §17h's summary.
pub fn evaluate_summary(plan: &Plan, rw: &Rewrite, max_turns: u32) -> String {
    let ev = evaluate(plan, max_turns);
    let n = ev.sprints.len();
    let atomic = ev.sprints.iter().filter(|s| s.atomic()).count();
    let testable = ev.sprints.iter().filter(|s| s.testable()).count();
    let fit = ev
        .sprints
        .iter()
        .filter(|s| s.fitness == Fitness::RightSized)
        .count();
    let mut out = format!(
        "## Evaluation Complete\n\n### Check Results\n\n| Check | Passed | Issues Found | Auto-Fixed |\n|-------|--------|-------------|------------|\n| Atomicity | {atomic} | {} | {} |\n| Testability | {testable} | {} | {} |\n| Context Fitness | {fit} | {} | {} |\n",
        n - atomic,
        rw.splits,
        n - testable,
        rw.criteria_fixed,
        n - fit,
        rw.splits + rw.merges
    );
    let _ = write!(
        out,
        "\n### Sprint Changes\n\n| Change | Count |\n|--------|-------|\n| Sprints before | {} |\n| Sprints after | {} |\n| Splits | {} |\n| Merges | {} |\n\nContext budget: {max_turns} turns per sprint\n",
        rw.sprints_before, rw.sprints_after, rw.splits, rw.merges
    );
    if !rw.changes.is_empty() {
        out.push_str("\n### What changed\n\n");
        for c in &rw.changes {
            let _ = writeln!(out, "- {c}");
        }
    }
    out.push_str("\nNext step: supervise start\n");
    out
}
