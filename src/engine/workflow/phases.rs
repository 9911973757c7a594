//! The phase workflow (seeds 002/003): research in parallel, a plan the plan
//! reader accepts, that plan's units run by the engine like any written plan,
//! the tests, up to three debug rounds when they fail, and a summary. Phase 0
//! (the artifact paths) is computed before any agent starts and recorded with
//! the operation, so every prompt and checkpoint names the same files.
//!
//! Each phase is a set of units the workflow adds when the phase before it has
//! settled; each phase's checkpoint is an exit criterion of its sprint.

use super::scope::Scope;
use super::{answer_of, command, file_written, report_written, status_of, unit, Next};
use crate::engine::state::{OperationState, UnitStatus};
use crate::plan::{SprintType, WorkUnit};
use serde::{Deserialize, Serialize};

pub const PLAN: &str = "plan";
pub const TESTING: &str = "testing";
pub const DOCS: &str = "docs";
pub const DEBUG: &str = "debug";
/// research-only: the reports' synthesis.
pub const OVERVIEW: &str = "overview";

/// The seed analysis's thresholds, as settings (`workflow:` in
/// `.github/supervise.yml`), with the seed's values as defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkflowSettings {
    /// Research agents for the simplest description.
    pub research_agents_min: u32,
    /// Research agents for the most complex one.
    pub research_agents_max: u32,
    /// Share of research agents (percent) that must produce a report.
    pub research_success_percent: u32,
    /// Debug rounds before the workflow stops.
    pub debug_rounds: u32,
    /// The project's test command; found from the repository when unset.
    pub test_command: Option<String>,
    /// Tasks a manager loop may run.
    pub max_tasks: u32,
}

impl Default for WorkflowSettings {
    fn default() -> Self {
        WorkflowSettings {
            research_agents_min: 2,
            research_agents_max: 4,
            research_success_percent: 50,
            debug_rounds: 3,
            test_command: None,
            max_tasks: 50,
        }
    }
}

/// The plan a plan-only workflow (a breakdown, an evaluation's fixes) made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedPlan {
    pub text: String,
    pub attempts: u32,
    /// The turn budget its checks held it to.
    pub max_turns: u32,
}

/// A phase workflow, fixed when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phases {
    pub description: String,
    pub scope: Scope,
    /// Why this scope (the rule's reason, or "asked for").
    pub scope_reason: String,
    /// `specs/NNN_topic`: every artifact lives below it.
    pub topic: String,
    /// One question per research agent.
    pub research: Vec<String>,
    pub research_success_percent: u32,
    pub debug_rounds: u32,
    pub test_command: Option<String>,
    /// A requirements document the plan must cover (`supervise plan
    /// breakdown` with an agent): no research, and the plan is accepted
    /// only when `breakdown::accept` finds nothing to fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub document: Option<String>,
    /// Where a breakdown's accepted plan is proposed (on GitHub:
    /// `EXECUTION_PLAN.md` beside the document, in a pull request of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_target: Option<String>,
    /// `supervise plan evaluate` with an agent: what the deterministic
    /// evaluation found in `document` (then a plan, not requirements); the
    /// agent's revision is accepted only when `evaluate::accept_fix` finds
    /// nothing left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revise: Option<String>,
}

/// §15's rules, as the planning agent of a breakdown is told them.
const BREAKDOWN_RULES: &str = "Rules (§15): find every requirement the document states (MUST/SHOULD/MAY sentences, user stories, feature and requirement lists, open checklist items, task language) and leave out what it puts out of scope; split each into atomic tasks (one deliverable each; a list of independent items becomes one task per item, each keeping the words the list shares); group tasks into work units by the document's sections, and into sprints of 3 to 7 tasks with one concern and one goal each, foundations first; every sprint's exit criteria are checks a machine can run — a command in backticks that passes, or a file that exists — wherever the requirement allows one, never vague words like \"works correctly\"; keep each sprint within about 40 agent turns. Every requirement must be in some sprint's tasks, in words close to the document's.";

/// The research angles, in the order agents are added as complexity grows.
const ANGLES: [(&str, &str); 4] = [
    ("codebase", "How the repository handles this today: the code, modules, conventions and tests it touches"),
    ("approaches", "Approaches and prior art: the options, their trade-offs, and the one you recommend"),
    ("risks", "Risks: edge cases, failure modes, security and performance concerns, and how to test it"),
    ("integration", "Integration: dependencies, configuration, data migrations and how to roll it out"),
];

/// Words that make a description call for more research.
const COMPLEX: &[&str] = &[
    "architecture",
    "security",
    "performance",
    "migration",
    "migrate",
    "distributed",
    "concurrency",
    "database",
    "authentication",
    "integrate",
    "integration",
    "protocol",
    "scale",
];

impl Phases {
    /// Phase 0: the scope, the topic directory and the research questions.
    /// `number` is the next free `specs/NNN_*` number in the repository.
    pub fn new(
        description: &str,
        scope: Option<Scope>,
        settings: &WorkflowSettings,
        number: u32,
    ) -> Phases {
        let (scope, scope_reason) = match scope {
            Some(s) => (s, "asked for explicitly".to_string()),
            None => super::scope::detect(description),
        };
        let topic = super::topic_dir(number, description);
        let words: Vec<String> = description
            .split(|c: char| !c.is_alphanumeric())
            .map(str::to_lowercase)
            .filter(|w| !w.is_empty())
            .collect();
        let hard = words
            .iter()
            .filter(|w| COMPLEX.contains(&w.as_str()))
            .count();
        let mut agents = settings.research_agents_min + hard.min(2) as u32;
        if words.len() > 40 {
            agents += 1;
        }
        let max = settings.research_agents_max.clamp(1, ANGLES.len() as u32);
        let agents = agents.clamp(settings.research_agents_min.clamp(1, max), max);
        let research = ANGLES[..agents as usize]
            .iter()
            .map(|(_, q)| q.to_string())
            .collect();
        Phases {
            description: description.trim().to_string(),
            scope,
            scope_reason,
            topic,
            research,
            research_success_percent: settings.research_success_percent.min(100),
            debug_rounds: settings.debug_rounds.max(1),
            test_command: settings.test_command.clone(),
            document: None,
            plan_target: None,
            revise: None,
        }
    }

    /// A breakdown of `document` by an agent: the plan phase alone, held to
    /// the checks every plan made from a document is held to; a plan that
    /// fails them is a failed attempt that says what to fix, retried on a
    /// stronger model like any sprint.
    pub fn breakdown(document: &str, settings: &WorkflowSettings, number: u32) -> Phases {
        let title = document
            .lines()
            .find_map(|l| l.trim().strip_prefix("# "))
            .unwrap_or("the requirements document");
        let mut p = Phases::new(
            &format!("Break down {title} into an execution plan"),
            Some(Scope::ResearchAndPlan),
            settings,
            number,
        );
        p.scope_reason = "a document to break down".into();
        p.research = Vec::new();
        p.document = Some(document.to_string());
        p
    }

    /// Fixes to `plan` by an agent: the plan phase alone, given the plan and
    /// what `evaluate` found, its revision held to `evaluate::accept_fix`.
    pub fn revision(
        plan: &str,
        findings: &str,
        settings: &WorkflowSettings,
        number: u32,
    ) -> Phases {
        let title = plan
            .lines()
            .find_map(|l| l.trim().strip_prefix("# "))
            .unwrap_or("the plan");
        let mut p = Phases::breakdown(plan, settings, number);
        p.description = format!("Fix what the evaluation of {title} found");
        p.topic = super::topic_dir(number, &p.description);
        p.scope_reason = "a plan to fix".into();
        p.revise = Some(findings.to_string());
        p
    }

    /// A breakdown's accepted plan, once the operation is complete: the
    /// plan phase's last answer (its checks passed, or it would not have
    /// completed), the attempts it took, and the turn budget it was checked
    /// against (a report recomputing its coverage uses the same).
    pub fn accepted_plan(st: &OperationState) -> Option<AcceptedPlan> {
        if st.status != crate::engine::OverallStatus::Completed {
            return None;
        }
        let u = st.unit_index(PLAN)?;
        let s = st.units[u].sprints.last()?;
        Some(AcceptedPlan {
            text: s.completion.as_ref()?.answer.clone()?,
            attempts: s.failures + 1,
            max_turns: st.config.max_turns,
        })
    }

    pub fn report_path(&self, i: usize) -> String {
        format!("{}/reports/{:03}_{}.md", self.topic, i + 1, ANGLES[i].0)
    }

    pub fn plan_path(&self) -> String {
        format!("{}/plans/001_implementation.md", self.topic)
    }

    pub fn overview_path(&self) -> String {
        format!("{}/reports/OVERVIEW.md", self.topic)
    }

    pub fn summary_path(&self) -> String {
        format!("{}/summaries/001_summary.md", self.topic)
    }

    fn test_report_path(&self) -> String {
        format!("{}/debug/000_test_results.md", self.topic)
    }

    fn debug_report_path(&self) -> String {
        format!("{}/debug/001_analysis.md", self.topic)
    }

    fn research_name(i: usize) -> String {
        format!("research-{}", i + 1)
    }

    fn is_research(unit: &str) -> bool {
        unit.strip_prefix("research-")
            .is_some_and(|n| n.parse::<u32>().is_ok())
    }

    /// A unit of the generated plan (not one of the workflow's own phases).
    pub fn is_implementation(&self, unit: &str) -> bool {
        !(Self::is_research(unit) || [PLAN, TESTING, DEBUG, DOCS, OVERVIEW].contains(&unit))
    }

    pub fn initial_units(&self) -> Vec<WorkUnit> {
        if let (Some(plan), Some(findings)) = (&self.document, &self.revise) {
            return vec![self.revise_unit(plan, findings)];
        }
        if let Some(doc) = &self.document {
            return vec![self.breakdown_unit(doc)];
        }
        (0..self.research.len())
            .map(|i| {
                let path = self.report_path(i);
                let body = format!(
                    "You are research agent {n} of {m} for this request:\n\n{desc}\n\nResearch topic: {q}.\n\nWrite a Markdown report (a `#` title, findings with file references, a recommendation) to `{path}` and commit it. Change nothing else. End with: REPORT_CREATED: {path}",
                    n = i + 1,
                    m = self.research.len(),
                    desc = quoted(&self.description),
                    q = self.research[i],
                );
                unit(
                    &Self::research_name(i),
                    Vec::new(),
                    &format!("Research {} of {}", i + 1, self.research.len()),
                    SprintType::Code,
                    body,
                    vec![report_written(&path)],
                )
            })
            .collect()
    }

    /// What the phases verified so far, in phase order.
    pub fn artifacts(&self, st: &OperationState) -> Vec<String> {
        let done = |u: &str| status_of(st, u) == Some(UnitStatus::Completed);
        let mut out: Vec<String> = self
            .reports_written(st)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        if done(OVERVIEW) {
            out.push(self.overview_path());
        }
        if done(PLAN) {
            out.push(self.plan_path());
        }
        if done(TESTING) {
            out.push(self.test_report_path());
        }
        if done(DEBUG) {
            out.push(self.debug_report_path());
        }
        if done(DOCS) {
            out.push(self.summary_path());
        }
        out
    }

    fn reports_written(&self, st: &OperationState) -> Vec<(String, String)> {
        (0..self.research.len())
            .filter(|&i| status_of(st, &Self::research_name(i)) == Some(UnitStatus::Completed))
            .map(|i| (Self::research_name(i), self.report_path(i)))
            .collect()
    }

    fn planning_unit(&self, st: &OperationState) -> WorkUnit {
        let reports = self.reports_written(st);
        let list: String = reports.iter().map(|(_, p)| format!("- {p}\n")).collect();
        let path = self.plan_path();
        let body = format!(
            "You are the planning agent for this request:\n\n{desc}\n\nRead the research reports:\n{list}\nWrite an implementation plan to `{path}` in the EXECUTION_PLAN.md format Sprint Supervisor reads: a `#` title, one `##` section per work unit (a Dependencies line naming the units it needs), and under it `### Sprint N: name` headings, each with its tasks and exit criteria as `- [ ]` items whose commands are in backticks. Exit criteria commands run in the unit's directory (its `Directory:` line; the repository root if none), so write them for there. Keep units independent where you can: they run in parallel. Validate it with `supervise plan show {path}` if the command is available. Commit it; change nothing else. End with: PLAN_CREATED: {path}",
            desc = quoted(&self.description),
        );
        unit(
            PLAN,
            reports.into_iter().map(|(n, _)| n).collect(),
            "Write the implementation plan",
            SprintType::Code,
            body,
            vec![file_written(&path)],
        )
    }

    /// The plan phase of a breakdown: the document and §15's rules.
    fn breakdown_unit(&self, doc: &str) -> WorkUnit {
        let path = self.plan_path();
        let body = format!(
            "You are the planning agent. Break the requirements document below into an execution plan and write it to `{path}` in the EXECUTION_PLAN.md format Sprint Supervisor reads: a `#` title, one `##` section per work unit (a Dependencies line naming the units it needs), and under it `### Sprint N: name` headings, each with its tasks and `**Exit criteria**:` as `- [ ]` items whose commands are in backticks.\n\n{BREAKDOWN_RULES}\n\nValidate it with `supervise plan show {path}` and `supervise plan analyze {path}` if the command is available. Commit it; change nothing else. End with: PLAN_CREATED: {path}\n\nThe document:\n\n{doc}",
            doc = quoted(doc),
        );
        unit(
            PLAN,
            Vec::new(),
            "Break the document down into a plan",
            SprintType::Code,
            body,
            vec![file_written(&path)],
        )
    }

    /// The plan phase of an evaluation's fixes: the plan, the findings and
    /// §17's rules for fixing them.
    fn revise_unit(&self, plan: &str, findings: &str) -> WorkUnit {
        let path = self.plan_path();
        let body = format!(
            "You are the plan editor. `supervise plan evaluate` found what is listed below in the execution plan that follows it. Write the whole plan, fixed, to `{path}`.\n\nFix each finding (§17f): replace a vague exit criterion with a command in backticks that passes or a file that exists; add a machine check to a sprint that has none, using that unit's own test command or files (never another unit's); split a sprint over the turn budget into sprints of one concern each; merge a sprint far under it into the next one of its unit. Keep every unit, its name and its dependencies, and every task (in the same unit); change nothing the findings do not ask for.\n\nValidate it with `supervise plan evaluate --dry-run {path}` if the command is available. Commit it; change nothing else. End with: PLAN_CREATED: {path}\n\nThe findings:\n\n{findings}\n\nThe plan:\n\n{plan}",
            findings = quoted(findings),
            plan = quoted(plan),
        );
        unit(
            PLAN,
            Vec::new(),
            "Fix the plan's findings",
            SprintType::Code,
            body,
            vec![file_written(&path)],
        )
    }

    /// research-only's last step (seed 002): one agent reads the reports and
    /// writes their synthesis; with another scope the planning agent does.
    fn overview_unit(&self, st: &OperationState) -> WorkUnit {
        let reports = self.reports_written(st);
        let list: String = reports.iter().map(|(_, p)| format!("- {p}\n")).collect();
        let path = self.overview_path();
        let body = format!(
            "You are the synthesis agent for this research request:\n\n{desc}\n\nWrite an overview to `{path}`: a `#` title, the question in one sentence, what the reports agree on, where they differ, and one recommendation, each point naming the report it comes from. Read the research reports:\n{list}\nCommit it; change nothing else. End with: OVERVIEW_CREATED: {path}",
            desc = quoted(&self.description),
        );
        unit(
            OVERVIEW,
            reports.into_iter().map(|(n, _)| n).collect(),
            "Write the overview of the research",
            SprintType::Code,
            body,
            vec![report_written(&path)],
        )
    }

    fn testing_unit(&self, depends_on: Vec<String>) -> WorkUnit {
        let report = self.test_report_path();
        let (run, mut exit) = match &self.test_command {
            Some(cmd) => (
                format!("Run the project's tests: `{cmd}`."),
                vec![command(&format!("`{cmd}` passes"), cmd)],
            ),
            None => (
                "Find the project's test command (README, CI configuration, build files) and run the tests.".to_string(),
                Vec::new(),
            ),
        };
        exit.insert(0, file_written(&report));
        let body = format!(
            "You are the test runner for this request:\n\n{desc}\n\n{run} Do not change any code. Write the results (command, totals passed and failed, the failures' output) to `{report}`, its last line `TEST_STATUS: passing` or `TEST_STATUS: failing`, and commit it. End with the same line.",
            desc = quoted(&self.description),
        );
        unit(
            TESTING,
            depends_on,
            "Run the tests",
            SprintType::Code,
            body,
            exit,
        )
    }

    /// Phase 5 as one unit whose attempts are the rounds: each round works on
    /// the same branch as the one before (its fixes and findings kept), and
    /// its prompt says what still fails.
    fn debug_unit(&self, depends_on: Vec<String>) -> WorkUnit {
        let report = self.debug_report_path();
        let mut exit = vec![file_written(&report)];
        if let Some(cmd) = &self.test_command {
            exit.push(command(&format!("`{cmd}` passes"), cmd));
        }
        // "why `cargo test` fails", "why the project's tests fail".
        let tests = self
            .test_command
            .as_deref()
            .map(|c| format!("`{c}` fails"))
            .unwrap_or_else(|| "the project's tests fail".into());
        let body = format!(
            "You are the debugger for this request (at most {max} rounds; a round that leaves the tests failing is followed by the next, on this branch):\n\n{desc}\n\nFind why {tests} (the test run's results, if any, are in `{results}`). Add this round's analysis (cause, evidence, the fix) as a new section of `{report}`, apply the fix, run the tests again, end the section with `TEST_STATUS: passing` or `TEST_STATUS: failing`, and commit. End with: DEBUG_REPORT_CREATED: {report}",
            max = self.debug_rounds,
            desc = quoted(&self.description),
            results = self.test_report_path(),
        );
        unit(
            DEBUG,
            depends_on,
            "Fix the failing tests",
            SprintType::Code,
            body,
            exit,
        )
    }

    fn docs_unit(&self, depends_on: Vec<String>, st: &OperationState) -> WorkUnit {
        let path = self.summary_path();
        let reports: String = self
            .reports_written(st)
            .iter()
            .map(|(_, p)| format!("- {p}\n"))
            .collect();
        let body = format!(
            "You are the documentation writer for this request:\n\n{desc}\n\nWrite the workflow summary to `{path}`: what was asked, what was built and where, the test results, and links to the research reports:\n{reports}- the plan: {plan}\nCommit it. End with: SUMMARY_CREATED: {path}",
            desc = quoted(&self.description),
            plan = self.plan_path(),
        );
        unit(
            DOCS,
            depends_on,
            "Write the workflow summary",
            SprintType::Code,
            body,
            vec![file_written(&path)],
        )
    }

    /// Whether `unit`'s answer lets the workflow go on; a plan is held to
    /// the checks of what made it, against the operation's turn budget
    /// (`max_turns`), the one its sprints will be given.
    pub fn check_answer(
        &self,
        unit: &str,
        answer: Option<&str>,
        max_turns: u32,
    ) -> Result<(), String> {
        if unit == PLAN {
            let path = self.plan_path();
            let text = answer.ok_or_else(|| format!("the plan `{path}` was not written"))?;
            self.implementation_units(text)?;
            if let (Some(original), Some(_)) = (&self.document, &self.revise) {
                let original = crate::plan::parse(original, "EXECUTION_PLAN.md")
                    .map_err(|_| "the plan being fixed no longer reads".to_string())?;
                if let Err(problems) =
                    crate::plan::tools::evaluate::accept_fix(&original, text, max_turns)
                {
                    return Err(format!(
                        "the plan `{path}` does not pass the evaluation's checks yet; fix each:\n- {}",
                        problems.join("\n- ")
                    ));
                }
                return Ok(());
            }
            if let Some(doc) = &self.document {
                if let Err(problems) = crate::plan::tools::breakdown::accept(doc, text, max_turns) {
                    return Err(format!(
                        "the plan `{path}` does not pass the breakdown's checks yet; fix each:\n- {}",
                        problems.join("\n- ")
                    ));
                }
            }
            return Ok(());
        }
        let Some(report) = self.status_report(unit) else {
            return Ok(());
        };
        // No test command to run: the agent's report of the run decides, by
        // its last TEST_STATUS line.
        let status = answer
            .unwrap_or("")
            .lines()
            .rev()
            .find_map(|l| {
                l.trim()
                    .trim_matches('`')
                    .trim()
                    .strip_prefix("TEST_STATUS:")
            })
            .map(|s| s.trim().to_ascii_lowercase());
        match status.as_deref() {
            Some("passing") => Ok(()),
            Some(_) => Err(format!("`{report}` says the tests fail (TEST_STATUS: failing)")),
            None => Err(format!(
                "`{report}` does not end with `TEST_STATUS: passing` or `TEST_STATUS: failing`, and there is no test command to run instead (set `without_plan.test_command`)"
            )),
        }
    }

    /// The report whose TEST_STATUS line is a unit's verdict on the tests,
    /// when no test command can be run instead (testing and debug rounds).
    fn status_report(&self, unit: &str) -> Option<String> {
        match unit {
            _ if self.test_command.is_some() => None,
            TESTING => Some(self.test_report_path()),
            DEBUG => Some(self.debug_report_path()),
            _ => None,
        }
    }

    /// The repository file whose content is a unit's answer: the plan, or
    /// a test or debug report whose TEST_STATUS decides.
    pub fn answer_file(&self, unit: &str) -> Option<String> {
        match unit {
            PLAN => Some(self.plan_path()),
            _ => self.status_report(unit),
        }
    }

    /// The generated plan's units, named apart from the workflow's own units.
    fn implementation_units(&self, text: &str) -> Result<Vec<WorkUnit>, String> {
        let path = self.plan_path();
        let plan = crate::plan::parse(text, "implementation").map_err(|problems| {
            let list: Vec<String> = problems
                .iter()
                .take(8)
                .map(|p| format!("{path}:{p}"))
                .collect();
            format!(
                "the plan reader cannot run `{path}` ({} problem(s)): {}",
                problems.len(),
                list.join("; ")
            )
        })?;
        let mut units = plan.work_units;
        if units.iter().any(|u| !self.is_implementation(&u.name)) {
            let own: Vec<String> = units.iter().map(|u| u.name.clone()).collect();
            for u in &mut units {
                u.name = format!("impl-{}", u.name);
                for d in &mut u.depends_on {
                    if own.contains(d) {
                        *d = format!("impl-{d}");
                    }
                }
            }
        }
        Ok(units)
    }

    pub fn max_attempts(&self, unit: &str) -> Option<u32> {
        // A test run that fails is an answer, not a reason to pay for another
        // run of the same tests: the debug rounds take over.
        match unit {
            TESTING => Some(1),
            DEBUG => Some(self.debug_rounds),
            _ => None,
        }
    }

    pub fn absorbs_failure(&self, unit: &str) -> bool {
        Self::is_research(unit) || unit == TESTING || unit == DEBUG
    }

    /// Tests that still fail are a failed test run or debug round, however
    /// much was written on the way.
    pub fn partial_is_failure(&self, unit: &str) -> bool {
        unit == TESTING || unit == DEBUG
    }

    pub fn next(&self, st: &OperationState) -> Next {
        use UnitStatus::{Blocked, Completed};
        if let Some(s) = status_of(st, DOCS) {
            return match s {
                Completed => Next::Finish {
                    why: format!("summary written to {}", self.summary_path()),
                },
                _ => Next::Nothing,
            };
        }
        if let Some(s) = status_of(st, DEBUG) {
            let rounds = st
                .unit_index(DEBUG)
                .map_or(0, |u| st.units[u].sprints[0].failures + 1);
            return match s {
                Completed if self.scope == Scope::DebugOnly => Next::Finish {
                    why: format!("the fix of debug round {rounds} passes its checks"),
                },
                Completed => Next::Add {
                    units: vec![self.docs_unit(vec![DEBUG.into()], st)],
                    why: format!(
                        "the tests pass after debug round {rounds}: phase 6, documentation"
                    ),
                },
                Blocked => Next::Block {
                    why: self.diagnostic(
                        "Phase 5, Debug",
                        &format!("the tests still fail after {} debug round(s)", rounds - 1),
                        &format!("tests passing after at most {} rounds", self.debug_rounds),
                        &[self.debug_report_path()],
                        "the fix needs a person, or more rounds (`without_plan.debug_rounds`)",
                    ),
                },
                _ => Next::Nothing,
            };
        }
        if let Some(s) = status_of(st, TESTING) {
            return match s {
                Completed => Next::Add {
                    units: vec![self.docs_unit(vec![TESTING.into()], st)],
                    why: "the tests pass: phase 6, documentation (phase 5 skipped)".into(),
                },
                Blocked => Next::Add {
                    units: vec![self.debug_unit(Vec::new())],
                    why: format!(
                        "the tests fail: phase 5, at most {} debug rounds",
                        self.debug_rounds
                    ),
                },
                _ => Next::Nothing,
            };
        }
        if let Some(s) = status_of(st, OVERVIEW) {
            return match s {
                Completed => Next::Finish {
                    why: format!(
                        "{} research reports and their overview, {}",
                        self.reports_written(st).len(),
                        self.overview_path()
                    ),
                },
                _ => Next::Nothing,
            };
        }
        if let Some(s) = status_of(st, PLAN) {
            if s != Completed {
                return Next::Nothing;
            }
            if self.scope != Scope::FullImplementation {
                return Next::Finish {
                    why: format!("the plan is written to {}", self.plan_path()),
                };
            }
            let units = match answer_of(st, PLAN).map(|t| self.implementation_units(t)) {
                Some(Ok(u)) if !u.is_empty() => u,
                Some(Err(e)) => return Next::Block { why: e },
                _ => {
                    return Next::Block {
                        why: format!("the plan `{}` has no work units", self.plan_path()),
                    }
                }
            };
            let names: Vec<String> = units.iter().map(|u| u.name.clone()).collect();
            let count = units.len();
            let mut all = units;
            all.push(self.testing_unit(names));
            return Next::Add {
                units: all,
                why: format!(
                    "phase 3, implementation: the plan's {}, then phase 4, testing",
                    crate::text::count(count, "work unit")
                ),
            };
        }
        // Phase 1 has settled: enough reports?
        let total = self.research.len();
        let written = self.reports_written(st).len();
        if written * 100 < total * self.research_success_percent as usize || written == 0 {
            let missing: Vec<String> = (0..total)
                .filter(|&i| status_of(st, &Self::research_name(i)) != Some(Completed))
                .map(|i| self.report_path(i))
                .collect();
            return Next::Block {
                why: self.diagnostic(
                    "Phase 1, Research",
                    &format!("{written} of {total} research reports were written"),
                    &format!(
                        "at least {}% of the research agents produce a non-empty report",
                        self.research_success_percent
                    ),
                    &missing,
                    "the research agents failed (their attempts are in the decision log), or wrote to another path than the one they were given",
                ),
            };
        }
        match self.scope {
            Scope::ResearchOnly => Next::Add {
                units: vec![self.overview_unit(st)],
                why: format!("{written} of {total} reports: the overview"),
            },
            Scope::DebugOnly => Next::Add {
                units: vec![self.debug_unit(
                    self.reports_written(st)
                        .into_iter()
                        .map(|(n, _)| n)
                        .collect(),
                )],
                why: format!("{written} of {total} reports: phase 5, debug"),
            },
            _ => Next::Add {
                units: vec![self.planning_unit(st)],
                why: format!("{written} of {total} reports: phase 2, planning"),
            },
        }
    }

    /// Seed 002's structured diagnostic: the error, expected and found, the
    /// paths involved, a command to look, the likely causes.
    fn diagnostic(
        &self,
        phase: &str,
        found: &str,
        expected: &str,
        paths: &[String],
        causes: &str,
    ) -> String {
        let paths: String = paths.iter().map(|p| format!("\n  - {p}")).collect();
        format!(
            "ERROR [{phase}]: checkpoint failed\n   Expected: {expected}\n   Found: {found}\nDIAGNOSTIC INFORMATION:\n  - Topic directory: {topic}/{paths}\nDiagnostic Commands:\n  git ls-tree -r --name-only HEAD -- {topic}\nMost Likely Causes:\n  {causes}\nTo go on: fix the cause, then `supervise resume` (the failed units run again).",
            topic = self.topic,
        )
    }

    pub fn summary(&self, st: &OperationState) -> Vec<String> {
        let phase = if status_of(st, DOCS).is_some() {
            "6, documentation"
        } else if status_of(st, DEBUG).is_some() {
            "5, debug"
        } else if status_of(st, TESTING).is_some() {
            "3–4, implementation and testing"
        } else if status_of(st, PLAN).is_some() {
            "2, planning"
        } else {
            "1, research"
        };
        vec![
            format!(
                "Workflow: {} (phases {}), because {}",
                self.scope,
                self.scope.phases(),
                self.scope_reason
            ),
            format!("Phase: {phase} · artifacts in {}/", self.topic),
        ]
    }
}

/// Untrusted text (an issue's body) set apart from the instructions around it.
pub(super) use crate::text::quoted;

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan made from a document is held to the operation's turn budget,
    /// the one its sprints will be given, not the default's: a sprint that
    /// fits 50 turns is over a budget of 10.
    #[test]
    fn a_breakdown_is_checked_against_the_operations_turn_budget() {
        let doc = "# Bookmarks\n\n## Features\n- Add support for JSON export\n";
        let p = Phases::breakdown(doc, &WorkflowSettings::default(), 1);
        let plan = "# Bookmarks\n\n## exports\n### Sprint 1: Exports\n- Add support for JSON export in `export.rs`\n\n**Exit criteria**:\n- [ ] `export.rs` exists\n";
        assert_eq!(p.check_answer(PLAN, Some(plan), 50), Ok(()));
        let tight = p.check_answer(PLAN, Some(plan), 10).unwrap_err();
        assert!(tight.contains("over the budget"), "{tight}");
    }

    /// Seed 002's checkpoint for research: a report over 200 bytes with a
    /// Markdown title. A stub, or text without a title, does not pass.
    #[test]
    fn a_research_report_must_be_a_report_not_a_stub() {
        let p = Phases::new("Add a flag", None, &WorkflowSettings::default(), 1);
        let unit = &p.initial_units()[0];
        let cmd = unit.sprints[0].exit_criteria[0].command.clone().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(p.report_path(0));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let passes = |text: &str| {
            std::fs::write(&path, text).unwrap();
            std::process::Command::new("sh")
                .args(["-c", &cmd])
                .current_dir(dir.path())
                .status()
                .unwrap()
                .success()
        };
        assert!(!passes("# Findings\n\nShort.\n"), "a stub");
        assert!(!passes(&"no title here. ".repeat(30)), "no title");
        assert!(passes(&format!(
            "# Findings\n\n{}\n",
            "a finding. ".repeat(30)
        )));
    }

    #[test]
    fn research_agents_grow_with_complexity_within_the_settings() {
        let s = WorkflowSettings::default();
        assert_eq!(Phases::new("Add a flag", None, &s, 1).research.len(), 2);
        let hard = "Migrate the database layer and rework authentication for performance";
        assert_eq!(Phases::new(hard, None, &s, 1).research.len(), 4);
        let narrow = WorkflowSettings {
            research_agents_max: 3,
            ..s
        };
        assert_eq!(Phases::new(hard, None, &narrow, 1).research.len(), 3);
    }

    #[test]
    fn phase_zero_names_every_artifact_under_one_topic() {
        let p = Phases::new(
            "Add rate limiting to the API",
            None,
            &WorkflowSettings::default(),
            7,
        );
        assert_eq!(p.topic, "specs/007_add_rate_limiting_to_the");
        assert_eq!(
            p.report_path(0),
            "specs/007_add_rate_limiting_to_the/reports/001_codebase.md"
        );
        assert_eq!(
            p.plan_path(),
            "specs/007_add_rate_limiting_to_the/plans/001_implementation.md"
        );
        assert_eq!(p.scope, Scope::FullImplementation);
    }
}
