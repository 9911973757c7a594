//! Work without a written plan, decided by the real engine: the phase workflow
//! (seeds 002/003) and the manager loop (seed 004), told as stories with the
//! harness that checks every invariant and replays the log on every event.

mod common;

use common::*;
use supervise::engine::workflow::{Manager, Phases, Scope, Workflow, WorkflowSettings};
use supervise::engine::*;

fn phases(description: &str, scope: Option<Scope>, research: u32) -> Workflow {
    let s = WorkflowSettings {
        research_agents_min: research,
        research_agents_max: research,
        test_command: Some("cargo test".into()),
        ..WorkflowSettings::default()
    };
    Workflow::Phases(Phases::new(description, scope, &s, 3))
}

fn answering(text: &str) -> AgentReport {
    let mut r = success();
    r.evidence.answer = Some(text.to_string());
    r
}

/// A failed attempt, as the runner reports one whose criteria failed.
fn tests_fail() -> AgentReport {
    let mut r = success();
    r.evidence.criteria[0].outcome = CriterionOutcome::Failed;
    r.output_tail = "TEST_STATUS: failing".into();
    r
}

fn units(sim: &Sim) -> Vec<(String, UnitStatus)> {
    sim.st()
        .units
        .iter()
        .map(|u| (u.name.clone(), u.status))
        .collect()
}

fn names(sim: &Sim) -> Vec<String> {
    sim.st().units.iter().map(|u| u.name.clone()).collect()
}

const PLAN: &str = "# Rate limiting\n\n## limiter\n### Sprint 1: Token bucket\n- [ ] `cargo test limiter` passes\n\n## config\n### Sprint 1: Settings\n- [ ] `cargo test config` passes\n\n## wiring\nDependencies: limiter, config\n### Sprint 1: Middleware\n- [ ] `cargo test api` passes\n";

#[test]
fn a_full_implementation_runs_every_phase_and_the_generated_plan_in_parallel() {
    let mut sim = Sim::start_workflow(
        phases("Add rate limiting to the API", None, 3),
        EngineConfig::default(),
    );
    // Phase 1: three research agents at once, told where to write.
    let out = sim.out();
    assert_eq!(out.len(), 3);
    assert!(out[0]
        .prompt
        .contains("specs/003_add_rate_limiting_to_the/reports/001_codebase.md"));
    assert!(out[0].prompt.contains("> Add rate limiting to the API"));
    assert!(
        !out[0].prompt.contains("EXECUTION_PLAN.md"),
        "{}",
        out[0].prompt
    );
    // One research agent fails every attempt: 2 of 3 is at least half.
    sim.finish("research-1", success());
    sim.finish("research-2", success());
    for _ in 0..3 {
        sim.finish("research-3", failure());
    }
    assert!(
        notices(&sim, NoticeKind::Blocked).is_empty(),
        "a research failure within the threshold asks no person"
    );
    // Phase 2: the plan, from the two reports written.
    let plan_order = sim.order_for("plan");
    assert_eq!(
        plan_order.answer_file.as_deref(),
        Some("specs/003_add_rate_limiting_to_the/plans/001_implementation.md")
    );
    assert!(plan_order.prompt.contains("reports/002_approaches.md"));
    assert!(!plan_order.prompt.contains("reports/003_risks.md"));
    // A plan the reader refuses is a failed attempt; the retry says why.
    sim.finish("plan", answering("# A plan\n\nJust prose, no units.\n"));
    let retry = sim.order_for("plan");
    assert_eq!(retry.kind, DispatchKind::Retry);
    assert!(
        retry.prompt.contains("the plan reader cannot run"),
        "{}",
        retry.prompt
    );
    sim.finish("plan", answering(PLAN));
    // Phase 3: the plan's units, run by the engine like a written plan's.
    let out: Vec<String> = sim.out().into_iter().map(|o| o.unit).collect();
    assert_eq!(
        out,
        ["limiter", "config"],
        "independent units run in parallel"
    );
    assert!(sim
        .order_for("limiter")
        .prompt
        .contains("1. specs/003_add_rate_limiting_to_the/plans/001_implementation.md"));
    sim.finish("limiter", success());
    sim.finish("config", success());
    sim.finish("wiring", success());
    // Phase 4: the tests fail once → debug rounds, not a BLOCKED notice.
    sim.finish("testing", tests_fail());
    assert_eq!(sim.unit("testing").status, UnitStatus::Blocked);
    assert!(notices(&sim, NoticeKind::Blocked).is_empty());
    // Its row reads BLOCKED (handed on); the count beside it says so too,
    // not "0" next to a BLOCKED row.
    let table = supervise::report::status_table(sim.st(), chrono::Utc::now());
    assert!(table.contains("BLOCKED (handed on)"), "{table}");
    let rows = table.matches("BLOCKED (handed on)").count();
    assert!(
        table.contains(&format!("Blocked work units: 0 waiting, {rows} handed on")),
        "{table}"
    );
    sim.finish("debug", tests_fail());
    let round2 = sim.order_for("debug");
    assert_eq!((round2.kind, round2.attempt), (DispatchKind::Retry, 2));
    assert!(round2.prompt.contains("debug/001_analysis.md"));
    assert!(
        round2.prompt.contains("cargo test"),
        "what still fails: {}",
        round2.prompt
    );
    sim.finish("debug", success());
    // Phase 6: the summary, then the end.
    assert!(sim
        .order_for("docs")
        .prompt
        .contains("summaries/001_summary.md"));
    sim.finish("docs", success());
    assert_eq!(
        sim.st().status,
        OverallStatus::Completed,
        "{:?}",
        units(&sim)
    );
    assert!(sim.st().status_reason.contains("summary written"));
    assert!(sim.effects.contains(&Effect::FinalReport));
    assert_eq!(
        names(&sim),
        [
            "research-1",
            "research-2",
            "research-3",
            "plan",
            "limiter",
            "config",
            "wiring",
            "testing",
            "debug",
            "docs"
        ]
    );
}

#[test]
fn research_below_the_threshold_stops_with_the_seeds_diagnostic() {
    let mut sim = Sim::start_workflow(
        phases("Research rate limiting", None, 3),
        EngineConfig::default(),
    );
    sim.finish("research-1", success());
    for _ in 0..3 {
        sim.finish("research-2", failure());
        sim.finish("research-3", failure());
    }
    assert_eq!(sim.st().status, OverallStatus::Blocked);
    let notice = notices(&sim, NoticeKind::Blocked).join("\n");
    assert!(notice.contains("ERROR [Phase 1, Research]"), "{notice}");
    assert!(notice.contains("Found: 1 of 3 research reports were written"));
    assert!(notice.contains("Expected: at least 50%"));
    assert!(notice.contains("reports/003_risks.md"));
    assert!(notice.contains("Most Likely Causes"));
    // Resume runs the failed agents again; with the reports, research-only
    // ends with their overview (seed 002).
    sim.send(Input::Resume {
        unit: Some("research-2".into()),
    })
    .unwrap();
    sim.finish("research-2", success());
    assert_eq!(names(&sim).len(), 4, "research-only adds the overview");
    assert_eq!(
        sim.st().plan.unit("overview").unwrap().depends_on,
        ["research-1", "research-2"]
    );
    sim.finish("overview", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
}

#[test]
fn each_scope_runs_its_phases_and_skips_the_others() {
    // research-and-plan: reports, a plan, and nothing built.
    let mut sim = Sim::start_workflow(
        phases("Design a plugin system", None, 2),
        EngineConfig::default(),
    );
    sim.finish("research-1", success());
    sim.finish("research-2", success());
    sim.finish("plan", answering(PLAN));
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert_eq!(names(&sim), ["research-1", "research-2", "plan"]);
    // debug-only: reports, then debug rounds; no plan, no summary.
    let mut sim = Sim::start_workflow(
        phases("Fix the crash on empty input", None, 2),
        EngineConfig::default(),
    );
    sim.finish("research-1", success());
    sim.finish("research-2", success());
    sim.finish("debug", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert_eq!(names(&sim), ["research-1", "research-2", "debug"]);
    // full implementation whose tests pass: no debug round.
    let mut sim = Sim::start_workflow(
        phases("anything", Some(Scope::FullImplementation), 2),
        EngineConfig::default(),
    );
    sim.finish("research-1", success());
    sim.finish("research-2", success());
    sim.finish("plan", answering(PLAN));
    for unit in ["limiter", "config", "wiring"] {
        sim.finish(unit, success());
    }
    sim.finish("testing", success());
    sim.finish("docs", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert!(!names(&sim).iter().any(|n| n.starts_with("debug")));
}

#[test]
fn debug_rounds_stop_at_the_limit_and_say_so() {
    let mut sim = Sim::start_workflow(
        phases("Fix the flaky parser", None, 2),
        EngineConfig::default(),
    );
    sim.finish("research-1", success());
    sim.finish("research-2", success());
    for _round in 1..=3 {
        sim.finish("debug", tests_fail());
    }
    assert_eq!(sim.st().status, OverallStatus::Blocked);
    assert!(sim.out().is_empty());
    let notice = notices(&sim, NoticeKind::Blocked).join("\n");
    assert!(
        notice.contains("the tests still fail after 3 debug round(s)"),
        "{notice}"
    );
    assert_eq!(sim.unit("debug").sprints[0].failures, 3);
}

#[test]
fn a_plan_that_never_parses_blocks_the_planning_phase_after_its_retries() {
    let mut sim = Sim::start_workflow(phases("Design the cache", None, 2), EngineConfig::default());
    sim.finish("research-1", success());
    sim.finish("research-2", success());
    for _ in 0..3 {
        sim.finish("plan", answering("not a plan"));
    }
    assert_eq!(sim.unit("plan").status, UnitStatus::Blocked);
    assert_eq!(sim.st().status, OverallStatus::Blocked);
    let notice = notices(&sim, NoticeKind::Blocked).join("\n");
    assert!(
        notice.contains("BLOCKED: plan Sprint 1 failed after 3 attempts"),
        "{notice}"
    );
    assert!(notice.contains("the plan reader cannot run"));
}

fn manager() -> Workflow {
    Workflow::Manager(Manager::new(
        "Refactor the API layer",
        "specs/004_refactor",
        50,
    ))
}

fn answer(next: Option<&str>, tasks: &[(&str, &str)]) -> String {
    serde_json::json!({
        "next_task": next,
        "tasks": tasks.iter().map(|(s, f)| serde_json::json!({"state": s, "file": f})).collect::<Vec<_>>(),
    })
    .to_string()
}

#[test]
fn the_manager_loop_runs_the_tasks_it_names_until_it_names_none() {
    let mut sim = Sim::start_workflow(manager(), EngineConfig::default());
    let first = sim.order_for("manager-1");
    assert!(first.prompt.contains("specs/004_refactor/KANBAN.md"));
    assert!(first.prompt.contains("$SUPERVISE_RESULT_FILE"));
    assert_eq!(first.answer_file, None, "the runner's own answer file");
    sim.finish(
        "manager-1",
        answering(&answer(
            Some("tasks/1.md"),
            &[("todo", "tasks/1.md"), ("todo", "tasks/2.md")],
        )),
    );
    let task = sim.order_for("task-1");
    assert!(task.prompt.contains("your task is `tasks/1.md`"));
    sim.finish("task-1", success());
    assert!(sim
        .order_for("manager-2")
        .prompt
        .contains("The task just done: `tasks/1.md`"));
    sim.finish(
        "manager-2",
        answering(&answer(
            Some("tasks/2.md"),
            &[("done", "tasks/1.md"), ("todo", "tasks/2.md")],
        )),
    );
    // The task list shown is the manager's own.
    let Some(Workflow::Manager(m)) = &sim.st().workflow else {
        unreachable!()
    };
    assert_eq!(
        m.summary(sim.st())[1..],
        [
            "- [x] tasks/1.md".to_string(),
            "- [ ] tasks/2.md".to_string()
        ]
    );
    sim.finish("task-2", success());
    sim.finish(
        "manager-3",
        answering(&answer(
            None,
            &[("done", "tasks/1.md"), ("done", "tasks/2.md")],
        )),
    );
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert!(sim.st().status_reason.contains("no task is left"));
}

#[test]
fn a_malformed_answer_is_retried_with_the_error_then_blocked_after_three_retries() {
    let mut sim = Sim::start_workflow(manager(), EngineConfig::default());
    let bad = [
        "Sure! Here is the JSON you asked for",
        r#"{"tasks": []}"#,
        r#"{"next_task": 7, "tasks": []}"#,
        r#"{"next_task": "tasks/9.md", "tasks": [{"state": "todo", "file": "tasks/1.md"}]}"#,
    ];
    for (i, text) in bad.iter().enumerate() {
        sim.finish("manager-1", answering(text));
        if i + 1 < bad.len() {
            let retry = sim.order_for("manager-1");
            assert_eq!(retry.attempt as usize, i + 2);
            assert!(
                retry.prompt.contains(
                    "Invalid JSON. Expected: {\"next_task\": str, \"tasks\": [...]}. Got: "
                ),
                "{}",
                retry.prompt
            );
        }
    }
    assert_eq!(sim.st().status, OverallStatus::Blocked);
    let notice = notices(&sim, NoticeKind::Blocked).join("\n");
    assert!(notice.contains("failed after 4 attempts"), "{notice}");
    assert!(
        notice.contains("tasks/9.md"),
        "the last answer is quoted: {notice}"
    );
    assert!(notice.contains("not a task marked todo"));
    assert!(sim.out().is_empty(), "no task runs on an invalid answer");
}

#[test]
fn a_manager_that_never_stops_is_capped_by_max_tasks() {
    let mut sim = Sim::start_workflow(
        Workflow::Manager(Manager::new("Loop", "specs/001_loop", 2)),
        EngineConfig::default(),
    );
    for k in 1..=2 {
        sim.finish(
            &format!("manager-{k}"),
            answering(&answer(Some("t.md"), &[("todo", "t.md")])),
        );
        sim.finish(&format!("task-{k}"), success());
    }
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert!(sim.st().status_reason.contains("2 tasks ran, the cap"));
    assert!(sim.out().is_empty());
}

#[test]
fn without_a_test_command_the_reports_own_test_status_decides() {
    let s = WorkflowSettings {
        research_agents_min: 2,
        research_agents_max: 2,
        test_command: None,
        ..WorkflowSettings::default()
    };
    let mut sim = Sim::start_workflow(
        Workflow::Phases(Phases::new("Add rate limiting to the API", None, &s, 3)),
        EngineConfig::default(),
    );
    sim.finish("research-1", success());
    sim.finish("research-2", success());
    sim.finish("plan", answering(PLAN));
    for u in ["limiter", "config", "wiring"] {
        sim.finish(u, success());
    }
    // The test run's report is its answer: the agent says the tests fail.
    let testing = sim.order_for("testing");
    assert_eq!(
        testing.answer_file.as_deref(),
        Some("specs/003_add_rate_limiting_to_the/debug/000_test_results.md")
    );
    assert!(
        testing.prompt.contains("TEST_STATUS: failing"),
        "{}",
        testing.prompt
    );
    sim.finish(
        "testing",
        answering("# Test results\n\n3 failed\n\nTEST_STATUS: failing\n"),
    );
    assert_eq!(sim.unit("testing").status, UnitStatus::Blocked);
    // A round whose report does not say is not taken for a fix.
    sim.finish(
        "debug",
        answering("## Round 1\n\nThe limiter ignored bursts.\n"),
    );
    let round2 = sim.order_for("debug");
    assert!(
        round2
            .prompt
            .contains("does not end with `TEST_STATUS: passing`"),
        "{}",
        round2.prompt
    );
    sim.finish(
        "debug",
        answering("## Round 1\n\nTEST_STATUS: failing\n\n## Round 2\n\nFixed.\n\n`TEST_STATUS: passing`\n"),
    );
    assert_eq!(sim.unit("debug").status, UnitStatus::Completed);
    sim.finish("docs", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert!(notices(&sim, NoticeKind::Blocked).is_empty());
}
