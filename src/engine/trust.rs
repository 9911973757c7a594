//! What an agent's work may not touch. The trusted step that checks an
//! attempt (in the runner, after the agent's job has ended) refuses work that
//! changes the supervisor's own records, the repository's settings or
//! workflows, or the criteria the work is judged by and the plan's structure
//! (units, their directories and dependencies) — before any of it is run.
//! Because no agent's change to the settings is ever taken, the settings on
//! the integration branch, which the verifying job reads, are the ones
//! people with write access put there. Pure: it is given
//! the paths the work changes and the plan before and after it.

use crate::plan::{Criterion, Plan};

/// Where the supervisor keeps what it commits itself: results records,
/// prompts, sprint definitions. An agent writing there forges the record.
pub const SUPERVISOR_DIR: &str = ".supervise/";

/// Workflows run with the repository's credentials: a workflow an agent wrote
/// is a privilege it gave itself.
pub const WORKFLOWS_DIR: &str = ".github/workflows/";

/// The repository's settings: the rules the verifying job applies to the
/// next sprint (`agent_may_change_workflows` among them). An agent that
/// could change them would loosen the rules a later agent is judged by.
pub const SETTINGS_FILES: [&str; 2] = [".github/supervise.yml", ".github/supervise.yaml"];

/// What the work is checked against.
pub struct Rules<'a> {
    /// The plan as the trusted commit holds it; `None` for work no plan file
    /// holds (its definition is under [`SUPERVISOR_DIR`], already guarded).
    pub plan: Option<&'a Plan>,
    /// The plan file's path in the repository, `/`-separated.
    pub plan_path: Option<&'a str>,
    /// The repository's settings allow agents to change workflows.
    pub workflows_allowed: bool,
}

/// Why the work is refused, if it is: `changed` are the paths the agent's
/// commits change (repository-relative), `plan_after` the plan file's text in
/// the work (`None` when the work has none).
pub fn refusal(rules: &Rules<'_>, changed: &[String], plan_after: Option<&str>) -> Option<String> {
    let listed = |prefix: &str| -> Vec<&str> {
        changed
            .iter()
            .map(String::as_str)
            .filter(|p| p.starts_with(prefix))
            .take(3)
            .collect()
    };
    let records = listed(SUPERVISOR_DIR);
    if !records.is_empty() {
        return Some(format!(
            "the agent's commits change the supervisor's own records ({}); only the trusted step writes under `{SUPERVISOR_DIR}`",
            records.join(", ")
        ));
    }
    if let Some(settings) = changed
        .iter()
        .find(|p| SETTINGS_FILES.contains(&p.as_str()))
    {
        return Some(format!(
            "the agent's commits change the repository's settings ({settings}), which set the rules work is verified by; only people with write access change them"
        ));
    }
    let workflows = listed(WORKFLOWS_DIR);
    if !workflows.is_empty() && !rules.workflows_allowed {
        return Some(format!(
            "the agent's commits change workflows ({}), which run with the repository's credentials; set `agent_may_change_workflows: true` in .github/supervise.yml to allow it",
            workflows.join(", ")
        ));
    }
    let (Some(before), Some(path)) = (rules.plan, rules.plan_path) else {
        return None;
    };
    if !changed.iter().any(|p| p == path) {
        return None;
    }
    let Some(text) = plan_after else {
        return Some(format!("the agent's commits delete the plan `{path}`"));
    };
    match crate::plan::parse(text, "plan") {
        Err(problems) => {
            let why: Vec<String> = problems.iter().take(3).map(|p| p.to_string()).collect();
            Some(format!(
                "the agent's commits leave the plan `{path}` unreadable: {}",
                why.join("; ")
            ))
        }
        Ok(after) => criteria_change(before, &after)
            .map(|what| {
                format!("the agent's commits change the exit or entry criteria in `{path}` ({what}); criteria are the plan's authors' to change")
            })
            .or_else(|| {
                structure_change(before, &after).map(|what| {
                    format!("the agent's commits change the plan's structure in `{path}` ({what}), which says what is verified where; only the plan's authors change it")
                })
            }),
    }
}

/// The first sprint whose criteria differ between the plans, named; the
/// criteria's lines may move (text above them changed), nothing else.
fn criteria_change(before: &Plan, after: &Plan) -> Option<String> {
    let same = |a: &[Criterion], b: &[Criterion]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.kind == y.kind
                    && x.text == y.text
                    && x.command == y.command
                    && x.expected == y.expected
                    && x.assertion == y.assertion
            })
    };
    for unit in &before.work_units {
        let Some(other) = after.unit(&unit.name) else {
            return Some(format!("work unit {} is gone", unit.name));
        };
        for sprint in &unit.sprints {
            let Some(o) = other.sprints.iter().find(|s| s.id == sprint.id) else {
                return Some(format!("{} Sprint {} is gone", unit.name, sprint.id));
            };
            if !same(&sprint.exit_criteria, &o.exit_criteria)
                || !same(&sprint.entry_criteria, &o.entry_criteria)
            {
                return Some(format!("{} Sprint {}", unit.name, sprint.id));
            }
        }
    }
    None
}

/// The first unit whose directory (where its criteria's paths and
/// commands are taken from) or dependencies (which work it is checked
/// after) differ, or a unit added, named. Prose — descriptions, notes,
/// ticked boxes — an agent may edit.
fn structure_change(before: &Plan, after: &Plan) -> Option<String> {
    for unit in &before.work_units {
        let other = after.unit(&unit.name)?;
        if unit.directory != other.directory {
            return Some(format!("work unit {}'s directory", unit.name));
        }
        if unit.depends_on != other.depends_on {
            return Some(format!("work unit {}'s dependencies", unit.name));
        }
    }
    after
        .work_units
        .iter()
        .find(|u| before.unit(&u.name).is_none())
        .map(|u| format!("work unit {} is new", u.name))
}

#[cfg(test)]
mod tests {
    use super::{refusal, Rules};
    use crate::plan::Plan;

    const PLAN: &str = "# Plan\n\n| Work Unit | Directory |\n|---|---|\n| api | api |\n\n## api\n### Sprint 1: Base\n- [ ] `done.txt` exists\n";

    fn plan(text: &str) -> Plan {
        crate::plan::parse(text, "plan").expect("the plan reads")
    }

    fn rules(p: &Plan) -> Rules<'_> {
        Rules {
            plan: Some(p),
            plan_path: Some("EXECUTION_PLAN.md"),
            workflows_allowed: false,
        }
    }

    fn changed(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn work_that_only_touches_the_code_is_not_refused() {
        let p = plan(PLAN);
        assert_eq!(
            refusal(&rules(&p), &changed(&["src/lib.rs", "done.txt"]), None),
            None
        );
    }

    #[test]
    fn a_record_written_by_the_agent_is_refused() {
        let p = plan(PLAN);
        let why = refusal(
            &rules(&p),
            &changed(&["src/lib.rs", ".supervise/results/op__api__1__1.json"]),
            None,
        )
        .expect("refused");
        assert!(
            why.contains(".supervise/results/op__api__1__1.json"),
            "{why}"
        );
    }

    #[test]
    fn a_workflow_change_is_refused_unless_the_repository_allows_it() {
        let p = plan(PLAN);
        let paths = changed(&[".github/workflows/ci.yml"]);
        let why = refusal(&rules(&p), &paths, None).expect("refused");
        assert!(why.contains("agent_may_change_workflows"), "{why}");
        let allowed = Rules {
            workflows_allowed: true,
            ..rules(&p)
        };
        assert_eq!(refusal(&allowed, &paths, None), None);
    }

    #[test]
    fn the_settings_are_protected_whatever_the_repository_allows() {
        let p = plan(PLAN);
        let loose = Rules {
            workflows_allowed: true,
            ..rules(&p)
        };
        for path in [".github/supervise.yml", ".github/supervise.yaml"] {
            let why = refusal(&loose, &changed(&["src/lib.rs", path]), None).expect("refused");
            assert!(why.contains(path) && why.contains("settings"), "{why}");
        }
    }

    #[test]
    fn a_plan_whose_directories_dependencies_or_units_change_is_refused_but_prose_is_not() {
        const TWO: &str = "# Plan\n\n| Work Unit | Directory | Depends On |\n|---|---|---|\n| api | api | — |\n| web | web | api |\n\n## api\n### Sprint 1: Base\n- [ ] `done.txt` exists\n\n## web\n### Sprint 1: Page\n- [ ] `page.txt` exists\n";
        let p = plan(TWO);
        let paths = changed(&["EXECUTION_PLAN.md"]);
        for (after, what) in [
            (
                TWO.replace("| api | api | — |", "| api | . | — |"),
                "api's directory",
            ),
            (
                TWO.replace("| web | web | api |", "| web | web | — |"),
                "web's dependencies",
            ),
            (
                TWO.replace(
                    "| web | web | api |\n",
                    "| web | web | api |\n| ops | ops | — |\n",
                ) + "\n## ops\n### Sprint 1: Ops\n- [ ] `ops.txt` exists\n",
                "ops is new",
            ),
        ] {
            let why = refusal(&rules(&p), &paths, Some(&after)).expect("refused");
            assert!(why.contains("structure") && why.contains(what), "{why}");
        }
        let prose = TWO.replace(
            "### Sprint 1: Page\n",
            "### Sprint 1: Page\nThe landing page, as the designer drew it.\n",
        );
        assert_eq!(refusal(&rules(&p), &paths, Some(&prose)), None);
    }

    #[test]
    fn weakened_criteria_are_refused_and_moved_ones_are_not() {
        let p = plan(PLAN);
        let paths = changed(&["EXECUTION_PLAN.md"]);
        let weakened = PLAN.replace("`done.txt` exists", "`README.md` exists");
        let why = refusal(&rules(&p), &paths, Some(&weakened)).expect("refused");
        assert!(why.contains("api Sprint 1"), "{why}");
        // A note added above the sprint moves every line; the criteria stand.
        let moved = PLAN.replace("# Plan\n", "# Plan\n\nSome context.\n");
        assert_eq!(refusal(&rules(&p), &paths, Some(&moved)), None);
        let gone = refusal(&rules(&p), &paths, Some("")).expect("refused");
        assert!(gone.contains("unreadable"), "{gone}");
        assert!(refusal(&rules(&p), &paths, None).is_some());
    }
}
