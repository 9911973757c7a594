//! Work without a written plan, on the same engine: a workflow is a rule that
//! looks at the operation when nothing can move and says what comes next — more
//! units (appended as [`Event::WorkAdded`](super::Event::WorkAdded), replayed
//! like every other event), the end, or a stop with its diagnostic. Two rules
//! exist: the phase workflow of seeds 002/003 ([`phases`]) and the manager loop
//! of seed 004 ([`manager`]). Dispatch, verification, retries, BLOCKED, crash
//! safety and the GitHub mapping are the engine's, unchanged.
//!
//! Pure like the rest of the engine: everything a rule decides from is in the
//! operation's state, including the answers agents handed back (recorded in
//! each sprint's completion).

pub mod manager;
pub mod phases;
pub mod scope;

use super::state::{OperationState, UnitStatus};
use crate::plan::{Criterion, CriterionKind, Sprint, SprintId, SprintType, WorkUnit};
use serde::{Deserialize, Serialize};

pub use manager::{Manager, ManagerAnswer};
pub use phases::{AcceptedPlan, Phases, WorkflowSettings};
pub use scope::Scope;

/// Phase 0's topic directory, `specs/NNN_words`: the number the door chose
/// and the first five words of the text it came from.
pub fn topic_dir(number: u32, text: &str) -> String {
    let slug = crate::text::slug(text);
    let slug: String = slug.split('-').take(5).collect::<Vec<_>>().join("_");
    format!(
        "specs/{number:03}_{}",
        if slug.is_empty() { "topic" } else { &slug }
    )
}

/// A file that tells how a project's tests are run.
pub struct TestCommandSource {
    pub file: &'static str,
    /// What the file's text must hold for the command to apply.
    pub holds: fn(&str) -> bool,
    pub command: &'static str,
}

const fn source(
    file: &'static str,
    holds: fn(&str) -> bool,
    command: &'static str,
) -> TestCommandSource {
    TestCommandSource {
        file,
        holds,
        command,
    }
}

/// How a project's tests are run, known from the files that name one. The
/// first match wins; both doors read the repository through this one table.
pub const TEST_COMMANDS: &[TestCommandSource] = &[
    source("Cargo.toml", |_| true, "cargo test"),
    source("package.json", |t| t.contains("\"test\""), "npm test"),
    source("go.mod", |_| true, "go test ./..."),
    source("pyproject.toml", |_| true, "python -m pytest"),
    source("pytest.ini", |_| true, "python -m pytest"),
    source("setup.py", |_| true, "python -m pytest"),
    source(
        "Makefile",
        |t| t.lines().any(|l| l.starts_with("test:")),
        "make test",
    ),
];

/// The rule an operation without a written plan follows; recorded when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workflow {
    Phases(Phases),
    Manager(Manager),
}

/// What a workflow wants once nothing in the operation can move.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Nothing of its own: the engine concludes as for a written plan.
    Nothing,
    /// The next phase (or task): these units join the operation.
    Add { units: Vec<WorkUnit>, why: String },
    /// The workflow reached its end, whatever units it left behind.
    Finish { why: String },
    /// The workflow cannot go on: the operation is BLOCKED with this diagnostic.
    Block { why: String },
}

impl Workflow {
    /// The units the operation starts with.
    pub fn initial_units(&self) -> Vec<WorkUnit> {
        match self {
            Workflow::Phases(p) => p.initial_units(),
            Workflow::Manager(m) => m.initial_units(),
        }
    }

    /// The plan an operation of this workflow starts with: its first units.
    pub fn plan(&self) -> crate::plan::Plan {
        crate::plan::Plan {
            title: self.title(),
            feature_name: None,
            dependency_structure: crate::plan::DependencyStructure::Graph,
            dispatch_mode: crate::plan::DispatchMode::Dynamic,
            dispatch_template: None,
            work_units: self.initial_units(),
            referenced_files: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// What the first reply says: what will run, and why.
    pub fn announcement(&self) -> String {
        match self {
            Workflow::Phases(p) => format!(
                "Scope: {} (phases {}), because {}.\nArtifacts: {}/ · research agents: {} · debug rounds at most {}{}",
                p.scope,
                p.scope.phases(),
                p.scope_reason,
                p.topic,
                p.research.len(),
                p.debug_rounds,
                p.test_command
                    .as_deref()
                    .map(|c| format!(" · tests: `{c}`"))
                    .unwrap_or_default()
            ),
            Workflow::Manager(m) => format!(
                "Manager loop: the kanban is {}; at most {} tasks. The manager answers with JSON naming the next task; a malformed answer is retried {} times with the error.",
                m.kanban,
                m.max_tasks,
                manager::MANAGER_ATTEMPTS - 1
            ),
        }
    }

    /// Files the supervisor writes on the integration branch before any agent
    /// starts (the manager's kanban): `(path, content)`.
    pub fn seed_files(&self) -> Vec<(String, String)> {
        match self {
            Workflow::Phases(_) => Vec::new(),
            Workflow::Manager(m) => vec![(m.kanban.clone(), m.kanban_text())],
        }
    }

    /// The name a scope is asked for by, when a workflow has one.
    pub fn scope(&self) -> Option<Scope> {
        match self {
            Workflow::Phases(p) => Some(p.scope),
            Workflow::Manager(_) => None,
        }
    }

    /// A title for the operation (its id and the status comment's heading).
    pub fn title(&self) -> String {
        match self {
            Workflow::Phases(p) => format!("{}: {}", p.scope.as_str(), short(&p.description)),
            Workflow::Manager(m) => format!("manage: {}", short(&m.request)),
        }
    }

    pub fn next(&self, st: &OperationState) -> Next {
        match self {
            Workflow::Phases(p) => p.next(st),
            Workflow::Manager(m) => m.next(st),
        }
    }

    /// Checks what a unit's agent handed back, for the units whose answer is
    /// part of their exit criteria (a plan the reader accepts, the manager's
    /// JSON). `Err` is the failure the retry's prompt carries.
    pub fn check_answer(
        &self,
        unit: &str,
        answer: Option<&str>,
        max_turns: u32,
    ) -> Result<(), String> {
        match self {
            Workflow::Phases(p) => p.check_answer(unit, answer, max_turns),
            Workflow::Manager(m) => m.check_answer(unit, answer),
        }
    }

    /// Attempts a unit's sprint gets, when the workflow sets its own number.
    pub fn max_attempts(&self, unit: &str) -> Option<u32> {
        match self {
            Workflow::Phases(p) => p.max_attempts(unit),
            Workflow::Manager(m) => m.max_attempts(unit),
        }
    }

    /// Whether a unit's last failure is the workflow's to answer (a research
    /// agent among several, a test run that sends the work to debugging)
    /// rather than a BLOCKED notice for a person.
    pub fn absorbs_failure(&self, unit: &str) -> bool {
        match self {
            Workflow::Phases(p) => p.absorbs_failure(unit),
            Workflow::Manager(_) => false,
        }
    }

    /// Whether a PARTIAL outcome of the unit counts as a failed attempt (a
    /// test run whose tests still fail), not as progress to continue.
    pub fn partial_is_failure(&self, unit: &str) -> bool {
        match self {
            Workflow::Phases(p) => p.partial_is_failure(unit),
            Workflow::Manager(_) => false,
        }
    }

    /// The repository file whose content is the unit's answer (the plan the
    /// planning phase writes); `None` where the agent writes its answer to
    /// the runner's own `$SUPERVISE_RESULT_FILE`.
    pub fn answer_file(&self, unit: &str) -> Option<String> {
        match self {
            Workflow::Phases(p) => p.answer_file(unit),
            Workflow::Manager(_) => None,
        }
    }

    /// The plan file implementation prompts point agents to.
    pub fn plan_file(&self, unit: &str) -> Option<String> {
        match self {
            Workflow::Phases(p) => p.is_implementation(unit).then(|| p.plan_path()),
            Workflow::Manager(_) => None,
        }
    }

    /// Files the workflow's agents have written so far, for people to open
    /// (reports, the plan, test and debug results, the summary; the kanban).
    pub fn artifacts(&self, st: &OperationState) -> Vec<String> {
        match self {
            Workflow::Phases(p) => p.artifacts(st),
            Workflow::Manager(m) => vec![m.kanban.clone()],
        }
    }

    /// Whether a unit is tracked as its own issue on GitHub: the generated
    /// plan's units are; the workflow's own phases and the manager's rounds
    /// and tasks are rows of the operation's status comment.
    pub fn has_own_issue(&self, unit: &str) -> bool {
        match self {
            Workflow::Phases(p) => p.is_implementation(unit),
            Workflow::Manager(_) => false,
        }
    }

    /// Lines for people: the scope and why, or the manager's task list.
    pub fn summary(&self, st: &OperationState) -> Vec<String> {
        match self {
            Workflow::Phases(p) => p.summary(st),
            Workflow::Manager(m) => m.summary(st),
        }
    }
}

fn short(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut out: String = line.trim().chars().take(60).collect();
    if line.trim().chars().count() > 60 {
        out.push('…');
    }
    out
}

/// The status of the unit named `name`, if the operation has it.
fn status_of(st: &OperationState, name: &str) -> Option<UnitStatus> {
    st.unit_index(name).map(|u| st.units[u].status)
}

/// The answer a unit's (single) sprint completed with.
fn answer_of<'a>(st: &'a OperationState, name: &str) -> Option<&'a str> {
    let u = st.unit_index(name)?;
    st.units[u]
        .sprints
        .last()?
        .completion
        .as_ref()?
        .answer
        .as_deref()
}

/// One unit of one sprint, as a workflow adds them.
fn unit(
    name: &str,
    depends_on: Vec<String>,
    sprint_name: &str,
    kind: SprintType,
    body: String,
    exit: Vec<Criterion>,
) -> WorkUnit {
    WorkUnit {
        name: name.to_string(),
        directory: None,
        layer: 0,
        depends_on,
        line: 0,
        section: None,
        sprints: vec![Sprint {
            id: SprintId::ordinal(1),
            name: sprint_name.to_string(),
            line: 0,
            kind,
            tasks: Vec::new(),
            entry_criteria: Vec::new(),
            exit_criteria: exit,
            notes: Vec::new(),
            body,
        }],
    }
}

/// An exit criterion the runner checks with a shell command.
fn command(text: &str, cmd: &str) -> Criterion {
    Criterion {
        kind: CriterionKind::Command,
        text: text.to_string(),
        line: 0,
        command: Some(cmd.to_string()),
        expected: None,
        assertion: None,
    }
}

/// The seed's checkpoint: the file exists and is not empty.
fn file_written(path: &str) -> Criterion {
    command(
        &format!("`{path}` exists and is not empty"),
        &format!("test -s {}", crate::text::shell_quote(path)),
    )
}

/// A research report as seed 002 asks for one: there, over 200 bytes, and
/// with a Markdown title (a `# ` line) — a stub or a bare line is no report.
fn report_written(path: &str) -> Criterion {
    let p = crate::text::shell_quote(path);
    command(
        &format!("`{path}` is a report: over 200 bytes, with a `#` title"),
        &format!("test \"$(wc -c < {p})\" -gt 200 && grep -q '^# ' {p}"),
    )
}
