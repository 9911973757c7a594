//! §18 analyze: three passes over a plan — completeness (point A, point B,
//! coverage, open questions), atomicity and testability (§17 evaluate,
//! diagnosis only), priority and parallelism (§16 prioritize, diagnosis only,
//! plus the critical path and the parallelism the dependencies allow) — and
//! `ANALYSIS_REPORT.md`. It never changes the plan.

use super::evaluate::{evaluate, Evaluation, Fitness};
use super::measure::{Keywords, OPEN_QUESTION_WORDS};
use super::prioritize::{prioritize, SprintPriority};
use crate::plan::Plan;
use serde::Serialize;
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Critical,
    Recommended,
    Optional,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub pass: u8,
    pub severity: Severity,
    /// The plan line it is about (0: the plan as a whole).
    pub line: usize,
    pub location: String,
    pub problem: String,
    pub recommendation: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub point_a: Vec<String>,
    pub point_b: Vec<String>,
    pub open_questions: Vec<(String, usize, String)>,
    pub evaluation: Evaluation,
    pub priorities: Vec<SprintPriority>,
    /// Unit names along the longest chain, and its length in sprints.
    pub critical_path: (Vec<String>, usize),
    /// Units that can run at once, layer by layer (by dependency depth).
    pub parallel_layers: Vec<Vec<String>>,
    /// Sprints many others wait on: (unit, sprint, how many they block).
    pub bottlenecks: Vec<(String, String, usize)>,
    /// §16f: units whose declared dependencies allow an earlier layer.
    pub layer_moves: Vec<String>,
    /// Units that can run at once under the plan's own layers (the largest).
    pub current_parallelism: usize,
    /// The largest number of units at one dependency depth once the missed
    /// opportunities are taken; None when there are none.
    pub parallelism_after_moves: Option<usize>,
    pub findings: Vec<Finding>,
}

impl Analysis {
    pub fn count(&self, pass: u8, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.pass == pass && f.severity == severity)
            .count()
    }

    pub fn critical(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Critical)
            .count()
    }
}

const POINT_A: &[&str] = &[
    "prerequisite",
    "starting state",
    "assumption",
    "precondition",
    "current state",
];
const POINT_B: &[&str] = &[
    "goal",
    "objective",
    "success criteria",
    "done definition",
    "definition of done",
    "deliverable",
    "target state",
];
/// Specifics left to the agent (§18 Pass 1, "missing specifics").
const UNSPECIFIC: &[&str] = &[
    "appropriate library",
    "suitable approach",
    "standard method",
    "todo",
];

static UNSPECIFIC_WORDS: Keywords = Keywords::new(UNSPECIFIC);

/// The plan's headings, lower-cased, with their lines, as the reader's own
/// Markdown parse finds them (code blocks and quotes are not headings).
fn headings(source: &str) -> Vec<(usize, String)> {
    crate::plan::blocks::parse(source)
        .blocks
        .iter()
        .filter_map(|b| b.heading().map(|(_, text)| (b.line(), text.to_lowercase())))
        .collect()
}

pub fn analyze(plan: &Plan, source: &str, max_turns: u32) -> Analysis {
    let mut findings = Vec::new();
    let heads = headings(source);
    // Pass 1: point A.
    let mut point_a: Vec<String> = heads
        .iter()
        .filter(|(_, h)| POINT_A.iter().any(|w| h.contains(w)))
        .map(|(l, h)| format!("section \"{h}\" (line {l})"))
        .collect();
    for u in &plan.work_units {
        if let Some(s) = u.sprints.first() {
            for c in &s.entry_criteria {
                point_a.push(format!("{} Sprint {} entry: {}", u.name, s.id, c.text));
            }
        }
    }
    if point_a.is_empty() {
        findings.push(Finding {
            pass: 1,
            severity: Severity::Recommended,
            line: 0,
            location: "plan".into(),
            problem: "point A is UNCLEAR: no prerequisites section and no entry criteria on any first sprint".into(),
            recommendation: "add a \"Prerequisites\" section saying what exists at the start".into(),
        });
    }
    // Pass 1: point B.
    let mut point_b: Vec<String> = heads
        .iter()
        .filter(|(_, h)| POINT_B.iter().any(|w| h.contains(w)))
        .map(|(l, h)| format!("section \"{h}\" (line {l})"))
        .collect();
    for u in &plan.work_units {
        if let Some(s) = u.sprints.last() {
            for c in s.exit_criteria.iter().filter(|c| c.is_machine_checkable()) {
                point_b.push(format!("{} Sprint {} exit: {}", u.name, s.id, c.text));
            }
        }
    }
    if point_b.is_empty() {
        findings.push(Finding {
            pass: 1,
            severity: Severity::Critical,
            line: 0,
            location: "plan".into(),
            problem: "point B is UNCLEAR: no goals section and no machine-checkable exit criterion on any unit's last sprint".into(),
            recommendation: "say what is done at the end: a \"Goals\" section, and checkable exit criteria on each unit's last sprint".into(),
        });
    }
    // Pass 1: coverage and open questions.
    let mut open_questions = Vec::new();
    for u in &plan.work_units {
        for s in &u.sprints {
            let at = format!("{} Sprint {}", u.name, s.id);
            if s.tasks.is_empty() && s.exit_criteria.is_empty() {
                findings.push(Finding {
                    pass: 1,
                    severity: Severity::Critical,
                    line: s.line,
                    location: at.clone(),
                    problem: "the sprint has neither tasks nor exit criteria: nothing says what it contributes".into(),
                    recommendation: "list its tasks and how to check them, or remove it".into(),
                });
            }
            let texts = s
                .tasks
                .iter()
                .chain(s.notes.iter())
                .chain(s.exit_criteria.iter().map(|c| &c.text))
                .chain(s.entry_criteria.iter().map(|c| &c.text));
            for t in texts {
                let lower = t.to_lowercase();
                // As words: a line about "todos" asks nothing.
                let hit = OPEN_QUESTION_WORDS
                    .word_in(&lower)
                    .or_else(|| UNSPECIFIC_WORDS.word_in(&lower));
                if let Some(w) = hit {
                    let line = line_of(source, t, s.line);
                    open_questions.push((at.clone(), line, t.clone()));
                    findings.push(Finding {
                        pass: 1,
                        severity: Severity::Critical,
                        line,
                        location: at.clone(),
                        problem: format!("open question (\"{w}\"): {t}"),
                        recommendation: "decide it in the plan before an agent is paid to guess"
                            .into(),
                    });
                }
            }
        }
    }
    // Pass 2: evaluate, diagnosis only.
    let evaluation = evaluate(plan, max_turns);
    for c in &evaluation.sprints {
        let at = format!("{} Sprint {}", c.unit, c.sprint);
        let severity = if !c.machine_verifiable || c.estimated_turns > evaluation.max_turns {
            Severity::Critical
        } else if c.fitness == Fitness::Undersized {
            Severity::Optional
        } else {
            Severity::Recommended
        };
        // A FAIL in the tables is always a finding, so the summary can never
        // say PASS beside one (a failed check whose fix evaluate could not
        // name is reported as the failed checks themselves).
        if c.all_fixes().next().is_none() && !(c.atomic() && c.testable()) {
            let failed: Vec<&str> = [
                (c.single_concern, "single concern"),
                (c.clear_artifact, "clear artifact"),
                (c.bounded_scope, "bounded scope"),
                (c.explicit_io, "explicit inputs and outputs"),
                (c.machine_verifiable, "machine-verifiable"),
                (c.no_vague_language, "no vague language"),
                (c.full_coverage, "full coverage"),
            ]
            .into_iter()
            .filter(|(ok, _)| !ok)
            .map(|(_, name)| name)
            .collect();
            findings.push(Finding {
                pass: 2,
                severity: if c.testable() {
                    Severity::Recommended
                } else {
                    Severity::Critical
                },
                line: c.line,
                location: at.clone(),
                problem: format!("fails {} ({})", failed.join(", "), c.name),
                recommendation: "rewrite the sprint so each failed check holds (see §17)".into(),
            });
        }
        for fix in c.all_fixes() {
            let severity = if fix.starts_with("merge into") {
                Severity::Optional
            } else {
                severity
            };
            findings.push(Finding {
                pass: 2,
                severity,
                line: c.line,
                location: at.clone(),
                problem: problem_of(c, fix),
                recommendation: fix.clone(),
            });
        }
    }
    // A sprint checked only by commands cannot show its own work: `cargo
    // test` on green tests passes before the work as after it, so the look
    // before a dispatch can never find such a sprint done (it is dispatched
    // even when its work is already on the head).
    for u in &plan.work_units {
        for s in &u.sprints {
            let checkable: Vec<_> = s
                .exit_criteria
                .iter()
                .filter(|c| c.is_machine_checkable())
                .collect();
            if s.kind == crate::plan::SprintType::Code
                && !checkable.is_empty()
                && checkable.iter().all(|c| c.assertion.is_none())
            {
                findings.push(Finding {
                    pass: 2,
                    severity: Severity::Optional,
                    line: s.line,
                    location: format!("{} Sprint {}", u.name, s.id),
                    problem: format!(
                        "every check of \"{}\" is a command; a command that passes before the work (a green `cargo test`) cannot tell done from not done, so this sprint is always given to an agent, even when its work is already there",
                        s.name
                    ),
                    recommendation: "add a criterion about what the sprint makes: `path/to/file` exists, or `path/to/file` contains \"text\"".into(),
                });
            }
        }
    }
    // Criteria read paths from the project's root, whatever the unit's
    // Directory: a criterion naming `greeting.txt` where the tasks make
    // `core/greeting.txt` can never pass, and every attempt is paid for.
    for u in &plan.work_units {
        for s in &u.sprints {
            for (c, path, meant) in root_path_slips(u, s) {
                findings.push(Finding {
                    pass: 2,
                    severity: Severity::Critical,
                    line: c,
                    location: format!("{} Sprint {}", u.name, s.id),
                    problem: format!(
                        "`{path}` is read from the project's root, but the sprint's tasks make `{meant}`: the criterion can never pass"
                    ),
                    recommendation: format!("write `{meant}` in the criterion"),
                });
            }
        }
    }
    // Pass 3: priority and parallelism.
    let priorities = prioritize(plan);
    for p in &priorities {
        if p.recommended + 2 <= p.position && p.priority >= 6.0 {
            findings.push(Finding {
                pass: 3,
                severity: Severity::Optional,
                line: 0,
                location: format!("{} Sprint {}", p.unit, p.sprint),
                problem: format!(
                    "priority {} but at position {} of {}",
                    p.priority,
                    p.position,
                    priorities.len()
                ),
                recommendation: format!(
                    "run it earlier (position {}): {}",
                    p.recommended, p.justification
                ),
            });
        }
    }
    let layer_moves = super::rewrite::layer_moves(plan, source);
    // A missed opportunity is work to do: the pass cannot say PASS beside it.
    for m in &layer_moves {
        findings.push(Finding {
            pass: 3,
            severity: Severity::Recommended,
            line: 0,
            location: "work units".into(),
            problem: format!("a missed opportunity for parallelism: {m}"),
            recommendation: "run `supervise plan prioritize` to move it".into(),
        });
    }
    let mut bottlenecks: Vec<(String, String, usize)> = priorities
        .iter()
        .filter(|p| p.dependency_depth >= 2)
        .map(|p| (p.unit.clone(), p.sprint.to_string(), p.dependency_depth))
        .collect();
    bottlenecks.sort_by_key(|b| std::cmp::Reverse(b.2));
    bottlenecks.truncate(10);
    let (critical_path, parallel_layers) = graph(plan);
    let mut per_layer: std::collections::BTreeMap<u32, usize> = Default::default();
    for u in &plan.work_units {
        *per_layer.entry(u.layer).or_default() += 1;
    }
    Analysis {
        current_parallelism: per_layer.values().copied().max().unwrap_or(0),
        bottlenecks,
        parallelism_after_moves: (!layer_moves.is_empty())
            .then(|| parallelism_after_moves(plan, source))
            .flatten(),
        layer_moves,
        point_a,
        point_b,
        open_questions,
        evaluation,
        priorities,
        critical_path,
        parallel_layers,
        findings,
    }
}

fn problem_of(c: &super::evaluate::SprintCheck, fix: &str) -> String {
    let what = if fix.starts_with("split at") {
        format!("oversized: est. {} turns", c.estimated_turns)
    } else if fix.starts_with("merge into") {
        format!("undersized: est. {} turns", c.estimated_turns)
    } else if fix.starts_with("split by concern") {
        "several concerns in one sprint".into()
    } else if fix.starts_with("name the files") {
        "no clear artifact".into()
    } else if fix.starts_with("add a machine check") {
        "no machine-verifiable exit criterion".into()
    } else if fix.starts_with("replace vague") {
        "vague exit criteria".into()
    } else if fix.starts_with("cover the tasks") {
        "exit criteria do not cover every task".into()
    } else {
        "inputs or outputs not explicit".into()
    };
    format!("{what} ({})", c.name)
}

/// The longest chain of units by sprint count, and the units by dependency
/// depth: one pass over the units in dependency order.
fn graph(plan: &Plan) -> ((Vec<String>, usize), Vec<Vec<String>>) {
    let units = &plan.work_units;
    let n = units.len();
    let crate::plan::UnitGraph { deps, dependents } = plan.graph();
    // Kahn's order (the reader refuses cycles, so every unit is reached).
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut order: Vec<usize> = (0..n).filter(|&u| waiting[u] == 0).collect();
    let mut k = 0;
    while k < order.len() {
        for &v in &dependents[order[k]] {
            waiting[v] -= 1;
            if waiting[v] == 0 {
                order.push(v);
            }
        }
        k += 1;
    }
    // Longest path ending at each unit, and its depth.
    let mut best: Vec<(usize, Option<usize>)> = vec![(0, None); n];
    let mut depth = vec![0usize; n];
    for &v in &order {
        let from = deps[v]
            .iter()
            .copied()
            .max_by_key(|&d| (best[d].0, std::cmp::Reverse(d)));
        best[v] = (from.map_or(0, |d| best[d].0) + units[v].sprints.len(), from);
        depth[v] = deps[v].iter().map(|&d| depth[d] + 1).max().unwrap_or(0);
    }
    let end = (0..n).max_by_key(|&i| (best[i].0, std::cmp::Reverse(i)));
    let length = end.map_or(0, |e| best[e].0);
    let mut chain = Vec::new();
    let mut at = end;
    while let Some(u) = at {
        chain.push(units[u].name.clone());
        at = best[u].1;
    }
    chain.reverse();
    let mut layers: Vec<Vec<String>> = Vec::new();
    for (u, d) in depth.iter().enumerate() {
        if layers.len() <= *d {
            layers.resize(d + 1, Vec::new());
        }
        layers[*d].push(units[u].name.clone());
    }
    ((chain, length), layers)
}

/// The line of `text` in the plan, at or after `from` (its sprint's
/// heading); `from` when it cannot be found as written.
fn line_of(source: &str, text: &str, from: usize) -> usize {
    let probe: String = text.chars().take(40).collect();
    source
        .lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, l)| l.contains(probe.trim()))
        .map_or(from, |(i, _)| i + 1)
}

/// Units at once at the largest dependency depth, once the plan's missed
/// opportunities are taken (`prioritize`'s layer moves applied).
fn parallelism_after_moves(plan: &Plan, source: &str) -> Option<usize> {
    let moved = super::rewrite::prioritized(plan, source);
    let moved = crate::plan::parse(&moved.text, &plan.title).ok()?;
    graph(&moved).1.iter().map(Vec::len).max()
}

fn mark(ok: bool) -> &'static str {
    if ok {
        "✓"
    } else {
        "✗"
    }
}

fn status(a: &Analysis, pass: u8) -> &'static str {
    if a.count(pass, Severity::Critical) + a.count(pass, Severity::Recommended) == 0 {
        "PASS"
    } else {
        "NEEDS_WORK"
    }
}

/// The summary table of §18's output, for the terminal and for replies.
pub fn summary(a: &Analysis) -> String {
    let mut out = String::from(
        "| Pass | Status | Critical | Recommended | Optional |\n|------|--------|----------|------------|----------|\n",
    );
    for (pass, name) in [
        (1, "Completeness"),
        (2, "Atomicity & Testability"),
        (3, "Priority & Parallelism"),
    ] {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} |",
            status(a, pass),
            a.count(pass, Severity::Critical),
            a.count(pass, Severity::Recommended),
            a.count(pass, Severity::Optional)
        );
    }
    let total = a.findings.len();
    let _ = writeln!(
        out,
        "\n**Total Issues**: {total} ({} critical, {} recommended, {} optional)",
        a.critical(),
        a.findings
            .iter()
            .filter(|f| f.severity == Severity::Recommended)
            .count(),
        a.findings
            .iter()
            .filter(|f| f.severity == Severity::Optional)
            .count()
    );
    out
}

/// `ANALYSIS_REPORT.md`.
pub fn report(a: &Analysis, plan_path: &str, generated: &str) -> String {
    let mut o = String::new();
    let ev = &a.evaluation;
    let _ = writeln!(o, "# Execution Plan Analysis Report\n\nGenerated: {generated}\nExecution plan: {plan_path}\nContext budget: {} turns per sprint\n\n---\n\n## Pass 1: Completeness Analysis\n", ev.max_turns);
    for (title, items) in [
        ("Point A (Current State)", &a.point_a),
        ("Point B (Target State)", &a.point_b),
    ] {
        let _ = writeln!(
            o,
            "### {title}\nStatus: {}\n",
            if items.is_empty() { "UNCLEAR" } else { "CLEAR" }
        );
        if items.is_empty() {
            let _ = writeln!(o, "**Findings**:\n- nothing in the plan documents it\n");
        } else {
            let _ = writeln!(o, "**Findings**:");
            for i in items.iter().take(20) {
                let _ = writeln!(o, "- {i}");
            }
            let _ = writeln!(o);
        }
    }
    let _ = writeln!(o, "### Open Questions\nCount: {}\n", a.open_questions.len());
    if !a.open_questions.is_empty() {
        let _ = writeln!(
            o,
            "| Question | Location | Line |\n|----------|----------|------|"
        );
        for (at, line, q) in &a.open_questions {
            let _ = writeln!(o, "| {} | {at} | {line} |", q.replace('|', "\\|"));
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "---\n\n## Pass 2: Atomicity & Testability Analysis\n\n### Atomicity Check\n\n| Sprint | Single Concern | Clear Artifact | Bounded Scope | Explicit I/O | Verdict |\n|--------|---------------|---------------|---------------|-------------|---------|");
    for c in &ev.sprints {
        let _ = writeln!(
            o,
            "| {} {} | {} | {} | {} | {} | {} |",
            c.unit,
            c.sprint,
            mark(c.single_concern),
            mark(c.clear_artifact),
            mark(c.bounded_scope),
            mark(c.explicit_io),
            if c.atomic() { "PASS" } else { "FAIL" }
        );
    }
    let _ = writeln!(o, "\n### Testability Check\n\n| Sprint | Machine-Verifiable | No Vague Language | Full Coverage | Verdict |\n|--------|-------------------|-------------------|--------------|---------|");
    for c in &ev.sprints {
        let _ = writeln!(
            o,
            "| {} {} | {} | {} | {} | {} |",
            c.unit,
            c.sprint,
            mark(c.machine_verifiable),
            mark(c.no_vague_language),
            mark(c.full_coverage),
            if c.testable() { "PASS" } else { "FAIL" }
        );
    }
    let _ = writeln!(o, "\n### Context Fitness Check\n\n| Sprint | Estimated Turns | Budget | Utilization | Verdict |\n|--------|----------------|--------|-------------|---------|");
    for c in &ev.sprints {
        let _ = writeln!(
            o,
            "| {} {} | {} | {} | {}% | {} |",
            c.unit,
            c.sprint,
            c.estimated_turns,
            ev.max_turns,
            c.estimated_turns * 100 / ev.max_turns,
            c.fitness.as_str()
        );
    }
    let (chain, length) = &a.critical_path;
    let max_parallel = a.parallel_layers.iter().map(Vec::len).max().unwrap_or(0);
    let _ = writeln!(o, "\n---\n\n## Pass 3: Priority & Parallelism Analysis\n\n### Dependency Graph\n\n**Critical Path**: {} (length: {length} sprints)\n\n**Parallelizable Clusters**:", chain.join(" → "));
    for (i, l) in a.parallel_layers.iter().enumerate() {
        let _ = writeln!(o, "- Depth {i}: {}", l.join(", "));
    }
    if !a.bottlenecks.is_empty() {
        let _ = writeln!(
            o,
            "\n**Bottlenecks**:\n| Sprint | Blocks | Reason |\n|--------|--------|--------|"
        );
        for (unit, sprint, blocks) in &a.bottlenecks {
            let _ = writeln!(
                o,
                "| {unit} {sprint} | {blocks} sprints | later sprints of {unit} and of the units that depend on it wait for it |"
            );
        }
    }
    let _ = writeln!(o, "\n### Parallelization Opportunities\n\n**Current Parallelism**: {} work units can run at once (the largest of the plan's layers)", a.current_parallelism);
    let _ = writeln!(o, "\n**Missed Opportunities**:");
    if a.layer_moves.is_empty() {
        let _ = writeln!(
            o,
            "- none: every unit is in the earliest layer its declared dependencies allow"
        );
    }
    for m in &a.layer_moves {
        let _ = writeln!(o, "- {m}");
    }
    let most = match a.parallelism_after_moves {
        Some(after) if after > max_parallel => format!(
            "{after} agents at once once the missed opportunities above are taken ({max_parallel} as the plan stands)"
        ),
        _ => format!("{max_parallel} agents at once (units at the same dependency depth)"),
    };
    let _ = writeln!(o, "\n**Maximum Parallelism**: {most}\n\n### Priority Analysis\n\n| Sprint | Priority | Current Position | Recommended Position | Justification |\n|--------|----------|-----------------|---------------------|---------------|");
    for p in &a.priorities {
        let _ = writeln!(
            o,
            "| {} {} | {} | {} | {} | {} |",
            p.unit, p.sprint, p.priority, p.position, p.recommended, p.justification
        );
    }
    let _ = writeln!(o, "\n### Execution Order Recommendations\n");
    let moves: Vec<&SprintPriority> = a
        .priorities
        .iter()
        .filter(|p| p.recommended != p.position)
        .collect();
    if moves.is_empty() {
        let _ = writeln!(o, "The plan's order is the recommended one.");
    }
    for (i, p) in moves.iter().enumerate() {
        let _ = writeln!(
            o,
            "{}. {} Sprint {} ({}): position {} → {} ({})",
            i + 1,
            p.unit,
            p.sprint,
            p.name,
            p.position,
            p.recommended,
            p.justification
        );
    }
    if let Some((unit, sprint, blocks)) = a.bottlenecks.first() {
        let first = a
            .priorities
            .iter()
            .find(|p| &p.unit == unit && p.sprint.to_string() == *sprint);
        let _ = writeln!(
            o,
            "\n**Bottleneck-early**: {unit} Sprint {sprint} blocks {blocks} sprints and is recommended at position {}.",
            first.map_or(0, |p| p.recommended)
        );
    }
    let _ = writeln!(o, "\n---\n\n## Summary\n\n{}", summary(a));
    if !a.findings.is_empty() {
        let _ = writeln!(o, "---\n\n## Detailed Findings\n");
        let mut sorted: Vec<&Finding> = a.findings.iter().collect();
        sorted.sort_by_key(|f| (f.severity, f.pass, f.line));
        for (i, f) in sorted.iter().enumerate() {
            let line = if f.line > 0 {
                format!(" (line {})", f.line)
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "### Issue {}: {}\n**Location**: {}{line}\n**Pass**: {}\n**Severity**: {:?}\n\n**Recommendation**: {}\n",
                i + 1,
                f.problem,
                f.location,
                f.pass,
                f.severity,
                f.recommendation
            );
        }
    }
    let _ = writeln!(
        o,
        "**Note**: `analyze` produces this report only; it does not modify the plan."
    );
    o
}

/// Exit criteria whose paths leave out the unit's Directory that the
/// sprint's own text puts in front of them: (criterion line, the path, the
/// path meant). Paths in criteria are the project root's.
pub fn root_path_slips(
    unit: &crate::plan::WorkUnit,
    sprint: &crate::plan::Sprint,
) -> Vec<(usize, String, String)> {
    let Some(dir) = unit.directory.as_deref().map(|d| d.trim_matches('/')) else {
        return Vec::new();
    };
    if dir.is_empty() || dir == "." {
        return Vec::new();
    }
    let text: String = std::iter::once(sprint.body.as_str())
        .chain(sprint.tasks.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = Vec::new();
    for c in &sprint.exit_criteria {
        let paths: Vec<&str> = match (&c.assertion, &c.command) {
            (
                Some(
                    crate::plan::Assertion::FileExists { path }
                    | crate::plan::Assertion::FileContains { path, .. },
                ),
                _,
            ) => vec![path.as_str()],
            (None, Some(cmd)) => cmd
                .split(|ch: char| ch.is_whitespace() || "'\";|&<>()".contains(ch))
                .filter(|w| !w.starts_with('-') && (w.contains('.') || w.contains('/')))
                .collect(),
            (None, None) => Vec::new(),
        };
        for p in paths {
            let p = p.trim_start_matches("./");
            if p.is_empty() || p.starts_with('/') || p.starts_with(&format!("{dir}/")) {
                continue;
            }
            let meant = format!("{dir}/{p}");
            let named = text.match_indices(&meant).any(|(i, _)| {
                // `core/greeting.txt`, not `score/greeting.txt` or `core/greeting.txt.bak`.
                let before = text[..i].chars().next_back();
                let after = text[i + meant.len()..].chars().next();
                !before.is_some_and(|b| b.is_alphanumeric() || b == '/' || b == '_' || b == '-')
                    && !after
                        .is_some_and(|a| a.is_alphanumeric() || a == '/' || a == '_' || a == '-')
            });
            if named && !out.iter().any(|(_, q, _): &(usize, String, String)| q == p) {
                out.push((c.line, p.to_string(), meant));
            }
        }
    }
    out
}
