//! The plain data model of a plan: what the reader found, with the source line of
//! every element. Nothing here knows about Markdown or about execution.

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::fmt;

/// A sprint id as the plan writes it: a number with an optional lower-case suffix
/// (`2`, `2a`, `2b`). Ordered numerically, then by suffix, so `2a` runs before `2b`
/// and `10` after `9`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SprintId(String);

/// `One` … `Twenty` as a number: `### Sprint Two: Page` is sprint 2.
fn number_word(t: &str) -> Option<usize> {
    const WORDS: [&str; 20] = [
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    WORDS
        .iter()
        .position(|w| w.eq_ignore_ascii_case(t))
        .map(|i| i + 1)
}

impl SprintId {
    /// Parses `2`, `2a`, `Sprint 2a`; `None` when it is not of that shape.
    pub fn parse(text: &str) -> Option<SprintId> {
        let t = text.trim();
        let t = t
            .strip_prefix("Sprint")
            .or_else(|| t.strip_prefix("sprint"))
            .unwrap_or(t)
            .trim();
        if let Some(n) = number_word(t) {
            return Some(SprintId::ordinal(n));
        }
        let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 || digits > 6 {
            return None;
        }
        let rest = &t[digits..];
        if rest.len() > 2 || !rest.chars().all(|c| c.is_ascii_alphabetic()) {
            return None;
        }
        Some(SprintId(format!(
            "{}{}",
            &t[..digits],
            rest.to_ascii_lowercase()
        )))
    }

    /// An id made from a plain ordinal (for plans whose sprints carry no number).
    pub fn ordinal(n: usize) -> SprintId {
        SprintId(n.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    fn key(&self) -> (u64, &str) {
        let digits = self.0.chars().take_while(|c| c.is_ascii_digit()).count();
        (
            self.0[..digits].parse().unwrap_or(u64::MAX),
            &self.0[digits..],
        )
    }
}

impl Ord for SprintId {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for SprintId {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SprintId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How work units depend on each other (§2c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DependencyStructure {
    /// A Layer / Tier column: every unit waits for all units of lower layers.
    Layers,
    /// Explicit edges: a Dependencies column, `depends on` text, a Mermaid graph.
    Graph,
    /// One unit whose sprints run in order.
    Sequential,
    /// Several units, no dependencies: all start in parallel.
    None,
}

impl DependencyStructure {
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyStructure::Layers => "layers",
            DependencyStructure::Graph => "graph",
            DependencyStructure::Sequential => "sequential",
            DependencyStructure::None => "none",
        }
    }
}

/// Whether prompts come from the plan's own template (§6c) or are built (§6d).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchMode {
    Template,
    Dynamic,
}

impl DispatchMode {
    pub fn as_str(self) -> &'static str {
        match self {
            DispatchMode::Template => "template",
            DispatchMode::Dynamic => "dynamic",
        }
    }
}

/// The kind of work a sprint is (§2g); it changes dispatch and verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SprintType {
    Code,
    Command,
    Background,
    Deferred,
    Manual,
}

impl SprintType {
    pub fn as_str(self) -> &'static str {
        match self {
            SprintType::Code => "code",
            SprintType::Command => "command",
            SprintType::Background => "background",
            SprintType::Deferred => "deferred",
            SprintType::Manual => "manual",
        }
    }

    pub fn parse(text: &str) -> Option<SprintType> {
        match text.trim().to_ascii_lowercase().as_str() {
            "code" => Some(SprintType::Code),
            "command" => Some(SprintType::Command),
            "background" => Some(SprintType::Background),
            "deferred" => Some(SprintType::Deferred),
            "manual" => Some(SprintType::Manual),
            _ => None,
        }
    }
}

impl fmt::Display for SprintType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a criterion can be checked (§2d).
impl CriterionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CriterionKind::Checklist => "checklist",
            CriterionKind::Command => "command",
            CriterionKind::Assertion => "assertion",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CriterionKind {
    /// Needs a person's judgement.
    Checklist,
    /// A shell command; exit status 0 (and matching output, if given) passes.
    Command,
    /// A boolean check on state, such as a file that must exist.
    Assertion,
}

/// A machine-checkable assertion the verifier knows how to evaluate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum Assertion {
    FileExists { path: String },
    FileContains { path: String, text: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Criterion {
    pub kind: CriterionKind,
    pub text: String,
    pub line: usize,
    /// The command to run, for `command` criteria.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub command: Option<String>,
    /// Text the command's output must contain (from an `Expected` block).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expected: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub assertion: Option<Assertion>,
}

impl Criterion {
    /// Whether `supervise verify` can decide this criterion without a person.
    pub fn is_machine_checkable(&self) -> bool {
        self.command.is_some() || self.assertion.is_some()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sprint {
    pub id: SprintId,
    pub name: String,
    pub line: usize,
    #[serde(rename = "type")]
    pub kind: SprintType,
    pub tasks: Vec<String>,
    pub entry_criteria: Vec<Criterion>,
    pub exit_criteria: Vec<Criterion>,
    /// Free text under the sprint that is neither a task nor a criterion.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub notes: Vec<String>,
    /// The sprint's definition exactly as the plan writes it (pasted into prompts).
    /// Stored with the operation: a supervisor restarted from its log must send
    /// the same assignment as the one that started it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkUnit {
    pub name: String,
    pub directory: Option<String>,
    pub layer: u32,
    pub depends_on: Vec<String>,
    pub line: usize,
    /// The number of the plan section that holds the unit's sprints (`8` for
    /// `## 8. Parser sprints`), which templates may refer to.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub section: Option<String>,
    pub sprints: Vec<Sprint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileRole {
    Progress,
    Todo,
    Status,
    Config,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferencedFile {
    /// Relative to the project root.
    pub path: String,
    pub role: FileRole,
    /// The unit whose directory holds it, for per-unit files.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub unit: Option<String>,
    /// Filled by [`crate::plan::load`]; the pure reader leaves it `false`.
    pub exists: bool,
    pub line: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchTemplate {
    pub text: String,
    pub line: usize,
    pub variables: Vec<String>,
}

/// A plan that can be run. Built only by the reader, which refuses unusable plans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub title: String,
    /// The operation name from the plan's frontmatter, once the naming ritual ran.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub feature_name: Option<String>,
    pub dependency_structure: DependencyStructure,
    pub dispatch_mode: DispatchMode,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dispatch_template: Option<DispatchTemplate>,
    pub work_units: Vec<WorkUnit>,
    pub referenced_files: Vec<ReferencedFile>,
    /// Odd but usable things the reader noticed.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<Problem>,
}

impl Plan {
    pub fn total_sprints(&self) -> usize {
        self.work_units.iter().map(|u| u.sprints.len()).sum()
    }

    pub fn unit(&self, name: &str) -> Option<&WorkUnit> {
        self.work_units.iter().find(|u| u.name == name)
    }

    /// The units' dependency edges by index, both ways.
    pub fn graph(&self) -> UnitGraph {
        UnitGraph::of(&self.work_units)
    }
}

/// Work units' dependency edges by index, both ways, read from the names
/// once (a name that is not a unit's is left out: the reader refuses such
/// plans).
pub struct UnitGraph {
    /// For each unit, the units it waits for.
    pub deps: Vec<Vec<usize>>,
    /// For each unit, the units that wait for it.
    pub dependents: Vec<Vec<usize>>,
}

impl UnitGraph {
    pub fn of(units: &[WorkUnit]) -> UnitGraph {
        let index: std::collections::HashMap<&str, usize> = units
            .iter()
            .enumerate()
            .map(|(i, u)| (u.name.as_str(), i))
            .collect();
        let deps: Vec<Vec<usize>> = units
            .iter()
            .map(|u| {
                u.depends_on
                    .iter()
                    .filter_map(|d| index.get(d.as_str()).copied())
                    .collect()
            })
            .collect();
        let mut dependents = vec![Vec::new(); units.len()];
        for (v, ds) in deps.iter().enumerate() {
            for &d in ds {
                dependents[d].push(v);
            }
        }
        UnitGraph { deps, dependents }
    }

    /// The units in an order where each comes after every unit it waits
    /// for (Kahn's algorithm). A loop, not a recursion: a chain of 50,000
    /// units overflowed a 2 MiB stack (a tokio worker's) when walked
    /// recursively. Units on a cycle, and those waiting on one, are left
    /// out; the plan reader refuses cycles.
    pub fn topological_order(&self) -> Vec<usize> {
        let mut left: Vec<usize> = self.deps.iter().map(Vec::len).collect();
        let mut ready: Vec<usize> = (0..left.len()).filter(|&u| left[u] == 0).collect();
        let mut order = Vec::with_capacity(left.len());
        while let Some(u) = ready.pop() {
            order.push(u);
            for &v in &self.dependents[u] {
                left[v] -= 1;
                if left[v] == 0 {
                    ready.push(v);
                }
            }
        }
        order
    }

    /// The units that wait, directly or not, for unit `unit`, in plan
    /// order; each unit is visited once (rescanning every unit's
    /// dependencies for each one reached took 3 s for a unit of the lowest
    /// layer of a plan of 1,000 units in ten layers, once per dispatch).
    pub fn dependents_of(&self, unit: usize) -> Vec<usize> {
        let n = self.dependents.len();
        let mut reached = vec![false; n];
        let mut todo = vec![unit];
        while let Some(i) = todo.pop() {
            for &v in self.dependents.get(i).into_iter().flatten() {
                if !reached[v] {
                    reached[v] = true;
                    todo.push(v);
                }
            }
        }
        (0..n).filter(|&v| reached[v]).collect()
    }

    /// Sprints of every unit that waits, directly or not, on unit `unit`.
    pub fn dependent_sprints(&self, units: &[WorkUnit], unit: usize) -> usize {
        self.dependents_of(unit)
            .into_iter()
            .map(|v| units[v].sprints.len())
            .sum()
    }
}

/// Something wrong (or odd) in a plan, with where it is and what to do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    pub line: usize,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hint: Option<String>,
}

impl Problem {
    pub fn new(line: usize, message: impl Into<String>) -> Problem {
        Problem {
            line,
            message: message.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Problem {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)?;
        if let Some(h) = &self.hint {
            write!(f, " ({h})")?;
        }
        Ok(())
    }
}
