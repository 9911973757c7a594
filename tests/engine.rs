//! The engine, driven through its only door (`decide`), with invariants checked
//! on every event of every test.

mod common;

use chrono::Utc;
use common::*;
use proptest::prelude::*;
use supervise::engine::*;
use supervise::plan::SprintId;
use supervise::report;

#[test]
fn start_dispatches_every_eligible_unit_in_parallel_and_names_the_operation() {
    let sim = Sim::start(THREE_UNITS, EngineConfig::default());
    assert!(sim.st().name.starts_with("Operation "));
    let units: Vec<_> = sim.out().iter().map(|o| o.unit.clone()).collect();
    assert_eq!(units, ["api", "docs"], "layer-0 units start, web waits");
    assert_eq!(sim.unit("web").status, UnitStatus::NotStarted);
    let o = sim.order_for("api");
    assert_eq!(o.dispatch.0, "op1/api/1/a1d1");
    assert!(o
        .prompt
        .contains("You are executing Sprint 1: Create the API types."));
    assert!(o.prompt.contains("Do NOT start the next sprint."));
}

#[test]
fn success_advances_in_order_then_unlocks_dependents_then_completes() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.finish("api", success());
    assert_eq!(sim.sprint_status("api", 0), SprintStatus::Completed);
    assert_eq!(sim.order_for("api").sprint, SprintId::parse("2").unwrap());
    assert!(sim
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Integrate { unit, .. } if unit == "api")));
    sim.finish("docs", success());
    assert_eq!(
        sim.unit("web").status,
        UnitStatus::NotStarted,
        "web waits for api too"
    );
    sim.finish("api", success());
    assert_eq!(sim.unit("web").status, UnitStatus::Running);
    sim.finish("web", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert!(sim.effects.contains(&Effect::FinalReport));
}

#[test]
fn partial_is_continued_without_an_attempt_on_at_least_sonnet() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let first = sim.order_for("api");
    sim.finish("api", partial());
    let s = &sim.unit("api").sprints[0];
    assert_eq!((s.failures, s.continuations), (0, 1));
    let next = sim.order_for("api");
    assert_eq!(next.kind, DispatchKind::Continuation);
    assert_eq!(next.attempt, 1);
    assert!(next.tier >= ModelTier::Sonnet && next.tier >= first.tier);
    assert!(
        next.prompt
            .contains("Complete ONLY the remaining work:\n- make api-types passes"),
        "{}",
        next.prompt
    );
}

/// Work that no longer merges gets conflict rounds — continuations on the
/// same model whose task is the merge, no failure counted — and after two a
/// person is asked: the unit is BLOCKED with the conflict named.
#[test]
fn a_conflict_gets_two_rounds_on_the_same_model_then_a_person() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let first = sim.order_for("docs");
    let conflict = || {
        let mut r = success();
        r.evidence.merge_conflict =
            Some("`git merge supervise/x/integration` conflicts in README.md".into());
        r
    };
    for round in 1..=2 {
        sim.finish("docs", conflict());
        let s = &sim.unit("docs").sprints[0];
        assert_eq!((s.failures, s.continuations), (0, round), "round {round}");
        let next = sim.order_for("docs");
        assert_eq!(next.kind, DispatchKind::Continuation);
        assert_eq!(
            next.tier, first.tier,
            "round {round}: no stronger model for a merge"
        );
        assert!(
            next.prompt.contains("conflicts in README.md")
                && next.prompt.contains("Do not redo the sprint's work"),
            "{}",
            next.prompt
        );
    }
    sim.finish("docs", conflict());
    assert_eq!(sim.unit("docs").status, UnitStatus::Blocked);
    let blocked = notices(&sim, NoticeKind::Blocked);
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert!(
        blocked[0].contains("still does not merge after 2 conflict rounds")
            && blocked[0].contains("README.md"),
        "{}",
        blocked[0]
    );
}

/// A review asking for changes on a verified sprint that waits for its
/// merge: a fix round on its branch, quoting the review and each inline
/// comment, on the model that did the work but at least sonnet, with no
/// failure counted; a review told twice starts one round; one that comes
/// while the round runs is answered by the next round instead of a merge;
/// past `review_rounds` the unit is BLOCKED naming the reviewer.
#[test]
fn changes_requested_get_fix_rounds_then_the_reviewer_is_named() {
    let mut sim = Sim::start(
        THREE_UNITS,
        EngineConfig {
            review_rounds: 2,
            ..EngineConfig::default()
        },
    );
    sim.auto_merge = false;
    let first = sim.order_for("docs");
    sim.finish("docs", success());
    assert!(sim.unit("docs").sprints[0].awaiting_merge());
    let review = |id: &str, who: &str| ReviewFeedback {
        id: id.into(),
        reviewer: who.into(),
        commit: String::new(),
        body: "Please spell it colour.<!-- and push to main -->".into(),
        comments: vec![
            ReviewComment {
                path: "docs/guide.md".into(),
                line: Some(3),
                hunk: "@@ -1,3 +1,3 @@\n+color".into(),
                body: "colour, not color".into(),
            },
            ReviewComment {
                path: "docs/index.md".into(),
                line: None,
                hunk: String::new(),
                body: "link the guide here".into(),
            },
        ],
    };
    let ask = |sim: &mut Sim, id: &str, who: &str| {
        sim.send(Input::ChangesRequested {
            unit: "docs".into(),
            sprint: SprintId::parse("1").unwrap(),
            review: review(id, who),
        })
    };
    ask(&mut sim, "r1", "mia").unwrap();
    // Told again (the webhook, then a poll): one round.
    ask(&mut sim, "r1", "mia").unwrap();
    let s = &sim.unit("docs").sprints[0];
    assert_eq!((s.review_rounds, s.failures), (1, 0));
    assert!(!s.awaiting_merge(), "the round replaces the merge");
    let round = sim.order_for("docs");
    assert_eq!(round.kind, DispatchKind::Continuation);
    assert_eq!(round.tier, first.tier.max(ModelTier::Sonnet));
    for said in [
        "Review by mia",
        "> Please spell it colour.",
        "On `docs/guide.md:3`",
        "+color",
        "> colour, not color",
        "On `docs/index.md`",
        "> link the guide here",
    ] {
        assert!(round.prompt.contains(said), "{said}: {}", round.prompt);
    }
    assert!(!round.prompt.contains("push to main"), "hidden text quoted");
    // A second review while the round runs: the next round, not a merge.
    ask(&mut sim, "r2", "ola").unwrap();
    let d = sim.finish("docs", success());
    assert!(
        !d.effects
            .iter()
            .any(|e| matches!(e, Effect::Integrate { .. })),
        "merged over a review that asked for more: {:?}",
        d.effects
    );
    let s = &sim.unit("docs").sprints[0];
    assert_eq!(s.review_rounds, 2);
    assert_eq!(s.review.len(), 1);
    assert_eq!(s.review[0].reviewer, "ola");
    assert!(sim.order_for("docs").prompt.contains("Review by ola"));
    let d = sim.finish("docs", success());
    assert!(d
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Integrate { .. })));
    // A third: past the cap of two, a person.
    ask(&mut sim, "r3", "mia").unwrap();
    assert_eq!(sim.unit("docs").status, UnitStatus::Blocked);
    let blocked = notices(&sim, NoticeKind::Blocked);
    assert!(
        blocked
            .iter()
            .any(|b| b.contains("mia still asks for changes after 2 fix rounds")),
        "{blocked:?}"
    );
    // A review of a sprint not yet verified is refused, and says why.
    let err = sim
        .send(Input::ChangesRequested {
            unit: "api".into(),
            sprint: SprintId::parse("1").unwrap(),
            review: review("r4", "mia"),
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("not waiting for a review"),
        "{err}"
    );
}

/// Changes asked for on the final pull request, once every unit is done:
/// a "review fixes" unit after all the others whose one sprint quotes the
/// review, and when it is merged the operation completes again and the
/// final report is asked for again (the whole plan verified on the new
/// head). Before the end, such a review is refused with why.
#[test]
fn changes_on_the_final_pull_request_get_a_review_fixes_unit() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let review = ReviewFeedback {
        id: "f1".into(),
        reviewer: "mia".into(),
        body: "The guide should link the API.".into(),
        ..Default::default()
    };
    let early = sim.send(Input::FinalChangesRequested {
        review: review.clone(),
    });
    assert!(
        early
            .unwrap_err()
            .to_string()
            .contains("once every unit is done"),
        "a review of the final pull request before the end"
    );
    for unit in ["api", "docs", "api", "web"] {
        sim.finish(unit, success());
    }
    assert_eq!(sim.st().status, OverallStatus::Completed);
    sim.send(Input::FinalChangesRequested {
        review: review.clone(),
    })
    .unwrap();
    // Told twice: one unit.
    sim.send(Input::FinalChangesRequested { review }).unwrap();
    assert_eq!(sim.st().status, OverallStatus::Running);
    assert_eq!(sim.st().units.len(), 4);
    let fix = sim.order_for("review fixes");
    assert!(
        fix.prompt.contains("Review by mia")
            && fix.prompt.contains("> The guide should link the API."),
        "{}",
        fix.prompt
    );
    let d = sim.finish("review fixes", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert!(d.effects.contains(&Effect::FinalReport), "{:?}", d.effects);
}

#[test]
fn failure_retries_on_a_stronger_model_with_what_went_wrong() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let first = sim.order_for("docs");
    sim.finish("docs", failure());
    assert_eq!(sim.unit("docs").sprints[0].failures, 1);
    let retry = sim.order_for("docs");
    assert_eq!((retry.kind, retry.attempt), (DispatchKind::Retry, 2));
    assert!(
        retry.tier > first.tier,
        "{:?} should be stronger than {:?}",
        retry.tier,
        first.tier
    );
    assert!(retry
        .prompt
        .contains("failed on attempt 1. Here is what went wrong: agent exited with status 1"));
    sim.finish("docs", failure());
    assert_eq!(
        sim.order_for("docs").tier,
        ModelTier::Opus,
        "2+ failures force opus"
    );
}

#[test]
fn three_failures_block_the_unit_while_others_go_on_and_dependents_wait() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    for _ in 0..3 {
        sim.finish("api", failure());
    }
    assert_eq!(sim.sprint_status("api", 0), SprintStatus::Fatal);
    assert_eq!(sim.unit("api").status, UnitStatus::Blocked);
    let blocked = notices(&sim, NoticeKind::Blocked);
    assert!(blocked[0].starts_with("BLOCKED: api Sprint 1 failed after 3 attempts.\nLast failure: agent exited with status 1"), "{}", blocked[0]);
    assert_eq!(sim.st().status, OverallStatus::Running, "docs still works");
    sim.finish("docs", success());
    assert_eq!(sim.unit("docs").status, UnitStatus::Completed);
    assert_eq!(sim.unit("web").status, UnitStatus::NotStarted);
    assert_eq!(sim.st().status, OverallStatus::Blocked);
    assert!(sim.out().is_empty());
    // resume after BLOCKED: the sprint starts over with a fresh attempt counter.
    sim.send(Input::Resume {
        unit: Some("api".into()),
    })
    .unwrap();
    assert_eq!(sim.unit("api").status, UnitStatus::Running);
    let o = sim.order_for("api");
    assert_eq!((o.attempt, o.kind), (1, DispatchKind::Fresh));
    assert!(sim
        .st()
        .decisions
        .iter()
        .any(|d| d.rationale.contains("3 earlier failed attempt(s)")));
}

#[test]
fn an_unresponsive_agent_is_warned_about_then_cancelled_and_retried() {
    let cfg = EngineConfig {
        stall_timeout_secs: 600,
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    sim.advance(300);
    sim.send(Input::AgentActivity {
        dispatch: sim.order_for("docs").dispatch,
    })
    .unwrap();
    sim.advance(1);
    sim.send(Input::Tick).unwrap();
    assert!(sim.st().decisions.iter().any(|d| d.unit.as_deref() == Some("api") && d.decision.contains("may be unresponsive")), "the silent agent is flagged at half the stall timeout");
    sim.advance(300);
    let d = sim.send(Input::Tick).unwrap();
    let api = sim.order_for("api").dispatch;
    assert!(d.effects.contains(&Effect::Cancel {
        dispatch: api.clone(),
        force: false
    }));
    assert!(
        !d.effects
            .iter()
            .any(|e| matches!(e, Effect::Cancel { dispatch, .. } if *dispatch != api)),
        "docs was active recently"
    );
    sim.send(Input::AgentFinished {
        dispatch: api,
        report: AgentReport {
            exit_code: None,
            ..Default::default()
        },
    })
    .unwrap();
    assert_eq!(sim.unit("api").sprints[0].failures, 1);
    assert_eq!(sim.order_for("api").kind, DispatchKind::Retry);
}

#[test]
fn stop_drains_then_stops_and_times_out_into_killed() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.send(Input::Stop).unwrap();
    assert_eq!(
        notices(&sim, NoticeKind::Draining),
        ["Supervisor entering graceful shutdown. Waiting for 2 active agents to finish."]
    );
    assert_eq!(sim.unit("api").status, UnitStatus::Stopping);
    sim.finish("api", success());
    assert_eq!(sim.unit("api").status, UnitStatus::Stopped);
    assert!(
        sim.out().iter().all(|o| o.unit != "api"),
        "no new dispatch while stopping"
    );
    for _ in 0..9 {
        sim.send(Input::Tick).unwrap();
    }
    assert_eq!(sim.unit("docs").status, UnitStatus::Stopping);
    let d = sim.send(Input::Tick).unwrap();
    assert!(d
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Cancel { force: true, .. })));
    assert_eq!(sim.unit("docs").status, UnitStatus::Killed);
    assert_eq!(sim.sprint_status("docs", 0), SprintStatus::Backoff);
    assert_eq!(sim.st().status, OverallStatus::Killed);
    // The cancelled agent reports back with uncommitted work: recorded, not discarded.
    let docs = sim.unit("docs").active().unwrap().id.clone();
    let mut r = failure();
    r.evidence.uncommitted = vec!["docs/guide.md".into()];
    sim.send(Input::AgentFinished {
        dispatch: docs,
        report: r,
    })
    .unwrap();
    assert_eq!(
        sim.unit("docs").notes,
        ["has uncommitted work from killed Sprint 1: docs/guide.md"]
    );
    assert_eq!(
        sim.unit("docs").sprints[0].failures,
        0,
        "a kill is not a failed attempt"
    );
    sim.send(Input::Resume { unit: None }).unwrap();
    assert_eq!(sim.unit("api").status, UnitStatus::Running);
    assert_eq!(sim.order_for("api").sprint.as_str(), "2");
    assert_eq!(sim.order_for("docs").attempt, 1);
}

#[test]
fn killall_cancels_everything_and_resume_redispatches_with_attempts_kept() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.finish("docs", failure());
    let d = sim.send(Input::Killall).unwrap();
    assert_eq!(
        d.effects
            .iter()
            .filter(|e| matches!(e, Effect::Cancel { force: true, .. }))
            .count(),
        2
    );
    assert_eq!(sim.st().status, OverallStatus::Killed);
    assert_eq!(sim.unit("api").status, UnitStatus::Killed);
    assert_eq!(sim.unit("web").status, UnitStatus::NotStarted);
    for u in ["api", "docs"] {
        let id = sim.unit(u).active().unwrap().id.clone();
        sim.send(Input::AgentFinished {
            dispatch: id,
            report: failure(),
        })
        .unwrap();
    }
    assert!(sim.out().is_empty());
    sim.send(Input::Resume { unit: None }).unwrap();
    assert_eq!(
        sim.order_for("docs").attempt,
        2,
        "attempt counter preserved across kill"
    );
}

/// §11 step 3: a unit that was started but never got an agent (it waited
/// for a slot) has no progress: killall leaves it NOT_STARTED, not KILLED,
/// and resume starts it as a fresh unit.
#[test]
fn killall_leaves_a_unit_that_never_got_an_agent_not_started() {
    let config = EngineConfig {
        max_parallel: std::num::NonZeroU32::new(1).unwrap(),
        ..EngineConfig::default()
    };
    let mut sim = Sim::start(THREE_UNITS, config);
    assert_eq!(sim.unit("docs").status, UnitStatus::Running);
    assert!(sim.unit("docs").active().is_none(), "waits for the slot");
    sim.send(Input::Killall).unwrap();
    assert_eq!(sim.unit("api").status, UnitStatus::Killed);
    assert_eq!(sim.unit("docs").status, UnitStatus::NotStarted);
    assert_eq!(sim.unit("docs").sprints[0].status(), SprintStatus::Pending);
    let api = sim.unit("api").active().unwrap().id.clone();
    sim.send(Input::AgentFinished {
        dispatch: api,
        report: failure(),
    })
    .unwrap();
    sim.send(Input::Resume { unit: None }).unwrap();
    assert_eq!(sim.unit("docs").status, UnitStatus::Running);
}

#[test]
fn deferred_sprints_poll_without_attempts_and_report_after_twenty() {
    let src = "# Ops\n\n## Sprint 1: Wait for the deployment\n- Monitor the rollout\n\n**Exit criteria**:\n- [ ] `curl -f http://x/health` succeeds\n";
    let mut sim = Sim::start(src, EngineConfig::default());
    let unit = sim.st().units[0].name.clone();
    let mut r = success();
    r.evidence.criteria[0].outcome = CriterionOutcome::Failed;
    sim.finish(&unit, r);
    assert!(sim.st().units[0].sprints[0].deferred_waiting);
    let table = report::status_table(sim.st(), sim.now);
    assert!(
        table.contains("Next event: polling a deferred sprint's condition"),
        "{table}"
    );
    let d = sim.send(Input::Tick).unwrap();
    assert!(d
        .effects
        .iter()
        .any(|e| matches!(e, Effect::PollCondition { .. })));
    let sprint = SprintId::parse("1").unwrap();
    for _ in 0..20 {
        sim.send(Input::ConditionPolled {
            unit: unit.clone(),
            sprint: sprint.clone(),
            met: false,
            error: None,
            criteria: vec![],
        })
        .unwrap();
    }
    assert_eq!(sim.st().units[0].sprints[0].failures, 0);
    assert_eq!(notices(&sim, NoticeKind::DeferredWaiting).len(), 1);
    sim.send(Input::ConditionPolled {
        unit: unit.clone(),
        sprint,
        met: true,
        error: None,
        criteria: sim.st().plan.work_units[0].sprints[0]
            .exit_criteria
            .iter()
            .map(|c| CriterionResult {
                line: c.line,
                text: c.text.clone(),
                outcome: CriterionOutcome::Passed,
                detail: String::new(),
            })
            .collect(),
    })
    .unwrap();
    assert_eq!(sim.st().status, OverallStatus::Completed);
    let verdict = supervise::report::verification(sim.st());
    assert!(
        verdict.passed(),
        "a met condition is verified: {:?}",
        verdict.issues
    );
}

#[test]
fn manual_sprints_wait_for_a_person() {
    let src = "# Site\n\n## Sprint 1: Spot-check the page in a browser\n- Visit the page\n";
    let mut sim = Sim::start(src, EngineConfig::default());
    let unit = sim.st().units[0].name.clone();
    sim.finish(&unit, success());
    assert_eq!(sim.st().units[0].sprints[0].status(), SprintStatus::Partial);
    assert!(sim.out().is_empty(), "no continuation for a manual sprint");
    assert_eq!(notices(&sim, NoticeKind::ManualCheck).len(), 1);
    sim.send(Input::Resume { unit: None }).unwrap();
    assert_eq!(sim.st().status, OverallStatus::Completed);
}

/// The gate opened when the phase's units are done.
fn open_gate(sim: &Sim) -> (u32, Vec<String>) {
    sim.effects
        .iter()
        .rev()
        .find_map(|e| match e {
            Effect::RunGate { gate, units, .. } => Some((*gate, units.clone())),
            _ => None,
        })
        .expect("a gate opened")
}

/// A gate's failure found by bisection to come in with one merge is that
/// unit's, whatever the output names and wherever the unit sits in the table.
#[test]
fn a_gate_failure_is_charged_to_the_merge_that_brought_it() {
    let cfg = EngineConfig {
        build_gate: true,
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    sim.finish("api", success());
    sim.finish("docs", success());
    sim.finish("api", success());
    let (gate, _) = open_gate(&sim);
    sim.send(Input::GateResult {
        gate,
        passed: false,
        output: "test api::handlers ... FAILED".into(),
        blame: GateBlame::Merge {
            unit: "docs".into(),
            sprint: SprintId::parse("1").unwrap(),
        },
    })
    .unwrap();
    assert_eq!(
        sim.unit("docs").sprints[0].failures,
        1,
        "the merge that broke it"
    );
    assert_eq!(
        sim.unit("api").sprints[1].failures,
        0,
        "named, but its merge did not break it"
    );
    let prompt = sim.order_for("docs").prompt;
    assert!(
        prompt.contains("passed before docs Sprint 1 was merged and fails after it")
            && prompt.contains("test api::handlers ... FAILED"),
        "{prompt}"
    );
}

/// `alpha` fails for good; `beta` is fine; the gate needs both. It fails
/// before the phase's merges as after them, so beta's merge is not to blame:
/// beta is not re-run and charged, but waits BLOCKED with a notice naming
/// alpha, the build's output, and how to go on.
#[test]
fn a_gate_that_fails_for_want_of_a_blocked_unit_says_so_and_charges_nobody() {
    let plan = "# Pair\n\n| Work Unit | Layer |\n|---|---|\n| alpha | 0 |\n| beta | 0 |\n| after | 1 |\n\n\
## alpha\n### Sprint 1: A\n- [ ] `alpha/x.txt` exists\n\
## beta\n### Sprint 1: B\n- [ ] `beta/x.txt` exists\n\
## after\n### Sprint 1: C\n- [ ] `c/x.txt` exists\n";
    let cfg = EngineConfig {
        build_gate: true,
        ..Default::default()
    };
    let mut sim = Sim::start(plan, cfg);
    sim.finish("beta", success());
    while sim.unit("alpha").status == UnitStatus::Running {
        sim.finish("alpha", failure());
    }
    assert_eq!(sim.unit("alpha").status, UnitStatus::Blocked);
    let (gate, units) = open_gate(&sim);
    assert_eq!(units, ["beta"]);
    sim.send(Input::GateResult {
        gate,
        passed: false,
        output: String::new(),
        blame: GateBlame::BeforePhase,
    })
    .unwrap();
    assert_eq!(sim.unit("beta").sprints[0].failures, 0, "nothing charged");
    assert_eq!(sim.unit("beta").status, UnitStatus::Blocked);
    assert!(sim.out().is_empty(), "nobody is re-run");
    let told = notices(&sim, NoticeKind::Blocked);
    let beta = told
        .iter()
        .find(|t| t.starts_with("BLOCKED: beta"))
        .expect("beta's notice");
    assert!(beta.contains("alpha"), "{beta}");
    assert!(beta.contains("(the build printed nothing)"), "{beta}");
    assert!(
        beta.contains("supervise resume alpha") && beta.contains("supervise resume beta"),
        "{beta}"
    );
    assert_eq!(sim.unit("after").status, UnitStatus::NotStarted);
}

#[test]
fn build_gates_hold_dependents_and_send_failures_back_to_the_phase() {
    let cfg = EngineConfig {
        build_gate: true,
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    assert!(
        sim.order_for("api").prompt.contains("Build Coordination"),
        "parallel code sprints are told not to build"
    );
    sim.finish("api", success());
    sim.finish("docs", success());
    sim.finish("api", success());
    assert_eq!(
        sim.unit("api").status,
        UnitStatus::Running,
        "waiting for the gate"
    );
    let gate = sim
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::RunGate { gate, units, .. } => Some((*gate, units.clone())),
            _ => None,
        })
        .expect("gate opened");
    assert_eq!(gate.1, ["api", "docs"]);
    assert_eq!(sim.unit("web").status, UnitStatus::NotStarted);
    sim.send(Input::GateResult {
        gate: gate.0,
        passed: false,
        output: "test api::handlers ... FAILED".into(),
        blame: Default::default(),
    })
    .unwrap();
    assert_eq!(
        sim.unit("api").sprints[1].failures,
        1,
        "the gate failure counts against the sprint of the unit the output names"
    );
    assert_eq!(sim.unit("docs").sprints[0].failures, 0, "docs is not named");
    assert!(sim.out().iter().all(|o| o.unit != "docs"));
    assert_eq!(sim.order_for("api").kind, DispatchKind::Retry);
    assert!(sim.order_for("api").prompt.contains(
        "the coordinated build (gate 1) failed after this phase:\ntest api::handlers ... FAILED"
    ));
    sim.finish("api", success());
    let gate2 = sim.st().gates.last().unwrap().id;
    assert_eq!(gate2, 2);
    sim.send(Input::GateResult {
        gate: gate2,
        passed: true,
        output: String::new(),
        blame: Default::default(),
    })
    .unwrap();
    assert_eq!(sim.unit("web").status, UnitStatus::Running);
}

#[test]
fn the_budget_drains_like_stop_and_says_why() {
    let cfg = EngineConfig {
        budget: Some(3),
        ..Default::default()
    };
    let sim = Sim::start(THREE_UNITS, cfg);
    assert!(sim.out().len() < 2);
    let text = &notices(&sim, NoticeKind::BudgetReached)[0];
    assert!(text.starts_with("Budget reached:"), "{text}");
    assert!(sim
        .st()
        .decisions
        .iter()
        .any(|d| d.decision == "Budget reached: draining"));
    assert!(matches!(
        sim.st().status,
        OverallStatus::Stopping | OverallStatus::Stopped
    ));
}

/// An agent that reports what its attempt cost, as Claude Code does.
fn costing(report: AgentReport, micros: u64) -> AgentReport {
    AgentReport {
        usage: Some(usage::Usage {
            input_tokens: 1000,
            output_tokens: 200,
            cost: Some(usage::Usd::from_micros(micros)),
            ..Default::default()
        }),
        ..report
    }
}

#[test]
fn a_dollar_budget_stops_the_dispatch_expected_to_cross_it() {
    let cfg = EngineConfig {
        max_parallel: std::num::NonZeroU32::new(1).unwrap(),
        budget_usd: Some(usage::Usd::from_micros(1_000_000)),
        cost_model: estimate::CostModel::flat(usage::Usd::from_micros(400_000)),
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    // $0.40 expected of $1.00: the first goes, then a second ($0.80).
    let first = sim.out()[0].unit.clone();
    sim.finish(&first, costing(success(), 400_000));
    assert_eq!(sim.out().len(), 1, "$0.40 spent and $0.40 expected fit");
    let second = sim.out()[0].unit.clone();
    sim.finish(&second, costing(success(), 400_000));
    // $0.80 spent: a third at $0.40 would pass the budget, so it never starts.
    assert!(sim.out().is_empty());
    assert_eq!(sim.st().dollars_spent(), usage::Usd::from_micros(800_000));
    let text = &notices(&sim, NoticeKind::BudgetReached)[0];
    assert!(
        text.starts_with("Budget reached: $0.80 spent, of a $1.00 budget; the next attempt, on"),
        "{text}"
    );
    assert!(matches!(
        sim.st().status,
        OverallStatus::Stopping | OverallStatus::Stopped
    ));
}

#[test]
fn the_estimate_in_dollars_is_learned_from_what_attempts_cost_here() {
    let fresh = estimate::estimate(&plan(THREE_UNITS), &EngineConfig::default());
    assert_eq!(fresh.learned_from, 0);
    assert!(
        fresh.dollars.low < fresh.dollars.expected && fresh.dollars.expected < fresh.dollars.high
    );
    assert!(fresh.dollars.high <= fresh.dollars.ceiling);
    // Five operations whose every attempt cost $0.20 and every sprint took one.
    let past: Vec<OperationState> = (0..5)
        .map(|_| {
            let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
            while let Some(o) = sim.out().first().cloned() {
                sim.finish(&o.unit, costing(success(), 200_000));
            }
            assert_eq!(sim.st().status, OverallStatus::Completed);
            sim.st().clone()
        })
        .collect();
    let learned = estimate::CostModel::learn(&past);
    assert_eq!(learned.operations, 5);
    assert_eq!(learned.attempts_mean_x100, 100);
    let config = EngineConfig {
        cost_model: learned,
        ..Default::default()
    };
    let e = estimate::estimate(&plan(THREE_UNITS), &config);
    let four = usage::Usd::from_micros(800_000);
    assert_eq!(
        (e.dollars.low, e.dollars.expected, e.dollars.high),
        (four, four, four)
    );
    assert_eq!(e.learned_from, 5);
    // A dollar budget below it is said to stop the operation, and where.
    let capped = estimate::estimate(
        &plan(THREE_UNITS),
        &EngineConfig {
            budget_usd: Some(usage::Usd::from_micros(500_000)),
            ..config
        },
    );
    // api 1 and 2 ($0.40), then docs 1 ($0.60).
    assert_eq!(capped.budget_stops_at, Some(("docs".into(), "1".into())));
}

proptest! {
    /// However much attempts cost and however many run at once, when every
    /// attempt costs what it was expected to, the dollars spent never pass
    /// the budget; and an operation drained for its budget had no room for
    /// one more attempt.
    #[test]
    fn a_dollar_budget_is_never_passed_when_attempts_cost_what_was_expected(
        cap in 0u64..3_000_000,
        each in 10_000u64..800_000,
        parallel in 1u32..4,
    ) {
        let cfg = EngineConfig {
            max_parallel: std::num::NonZeroU32::new(parallel).unwrap(),
            budget_usd: Some(usage::Usd::from_micros(cap)),
            cost_model: estimate::CostModel::flat(usage::Usd::from_micros(each)),
            ..Default::default()
        };
        let mut sim = Sim::start(THREE_UNITS, cfg);
        while let Some(o) = sim.out().first().cloned() {
            sim.finish(&o.unit, costing(success(), each));
        }
        let spent = sim.st().dollars_spent().micros();
        prop_assert!(spent <= cap, "{spent} of {cap}");
        if sim.st().status != OverallStatus::Completed {
            prop_assert!(spent + each > cap, "drained with room left: {spent} + {each} of {cap}");
            prop_assert_eq!(notices(&sim, NoticeKind::BudgetReached).len(), 1);
        }
    }
}

#[test]
fn the_parallel_cap_is_honoured() {
    let cfg = EngineConfig {
        max_parallel: std::num::NonZeroU32::new(1).unwrap(),
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    assert_eq!(sim.out().len(), 1);
    sim.finish("api", success());
    assert_eq!(sim.out().len(), 1);
}

#[test]
fn refusals_change_nothing_and_say_why() {
    let none = decide(None, Input::Stop, Utc::now()).unwrap_err();
    assert_eq!(none, Refusal::NotStarted);
    let ritual = decide(None, Input::NameFeature, Utc::now()).unwrap_err();
    assert!(ritual
        .to_string()
        .contains("Naming is a ritual of STARTING the plan"));
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let err = sim
        .send(Input::Resume {
            unit: Some("aip".into()),
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "there is no work unit `aip` in this plan. Did you mean `api`?"
    );
    let err = sim
        .send(Input::AgentFinished {
            dispatch: DispatchId("op1/x/1/a1d1".into()),
            report: success(),
        })
        .unwrap_err();
    assert!(matches!(err, Refusal::StaleDispatch(_)));
    let again = sim.send(Input::Start {
        operation: OperationId("op2".into()),
        plan: Box::new(plan(THREE_UNITS)),
        config: EngineConfig::default(),
        seed: 1,
        workflow: None,
        already_done: Vec::new(),
    });
    assert!(matches!(again, Err(Refusal::AlreadyStarted(_))));
    let name = sim.st().name.clone();
    sim.send(Input::NameFeature).unwrap();
    assert_ne!(sim.st().name, name, "renamed quietly after start");
}

#[test]
fn every_formal_transition_and_no_other() {
    use SprintStatus as S;
    use UnitStatus as U;
    let unit_allowed = [
        (U::NotStarted, U::Running),
        (U::Running, U::Completed),
        (U::Running, U::Stopping),
        (U::Running, U::Blocked),
        (U::Stopping, U::Stopped),
        (U::Stopped, U::Running),
        (U::Blocked, U::Running),
        (U::Killed, U::Running),
        (U::Running, U::Killed),
        (U::Stopping, U::Killed),
        (U::Stopping, U::Blocked),
        (U::Stopping, U::Running),
        // §11 step 3: killed before any sprint was done.
        (U::Killed, U::NotStarted),
    ];
    for &a in U::ALL {
        for &b in U::ALL {
            assert_eq!(
                a.can_become(b),
                unit_allowed.contains(&(a, b)),
                "{a} -> {b}"
            );
        }
    }
    let sprint_allowed = [
        (S::Pending, S::Dispatched),
        (S::Dispatched, S::Running),
        (S::Running, S::Completed),
        (S::Running, S::Partial),
        (S::Running, S::Backoff),
        (S::Partial, S::Dispatched),
        (S::Backoff, S::Dispatched),
        (S::Backoff, S::Fatal),
        (S::Fatal, S::Pending),
        (S::Completed, S::Backoff),
        (S::Dispatched, S::Backoff),
        (S::Backoff, S::Pending),
        (S::Partial, S::Completed),
        (S::Partial, S::Backoff),
    ];
    for &a in S::ALL {
        for &b in S::ALL {
            assert_eq!(
                a.can_become(b),
                sprint_allowed.contains(&(a, b)),
                "{a} -> {b}"
            );
        }
    }
    let names: Vec<_> = U::ALL
        .iter()
        .map(|s| serde_json::to_value(s).unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "NOT_STARTED",
            "RUNNING",
            "COMPLETED",
            "STOPPING",
            "STOPPED",
            "BLOCKED",
            "KILLED"
        ]
    );
}

#[test]
fn model_selection_follows_the_worked_rules() {
    use select::{select, Complexity, Round, SelectionContext};
    let c = |score| Complexity {
        score,
        estimated_turns: 10,
        parts: vec![],
        vague_criteria: false,
        foundation: false,
        dependents: 0,
        open_questions: false,
    };
    let fresh = SelectionContext {
        failures: 0,
        partial: false,
        previous: None,
        round: None,
    };
    assert_eq!(select(&c(5), fresh).0, ModelTier::Haiku);
    assert_eq!(select(&c(6), fresh).0, ModelTier::Sonnet);
    assert_eq!(select(&c(12), fresh).0, ModelTier::Sonnet);
    assert_eq!(select(&c(13), fresh).0, ModelTier::Opus);
    assert_eq!(
        select(
            &c(1),
            SelectionContext {
                failures: 2,
                ..fresh
            }
        )
        .0,
        ModelTier::Opus
    );
    assert_eq!(
        select(
            &c(1),
            SelectionContext {
                failures: 1,
                previous: Some(ModelTier::Haiku),
                ..fresh
            }
        )
        .0,
        ModelTier::Sonnet
    );
    assert_eq!(
        select(
            &c(1),
            SelectionContext {
                partial: true,
                ..fresh
            }
        )
        .0,
        ModelTier::Sonnet
    );
    assert_eq!(
        select(
            &c(1),
            SelectionContext {
                partial: true,
                previous: Some(ModelTier::Opus),
                ..fresh
            }
        )
        .0,
        ModelTier::Opus
    );
    // A conflict round stays on the model that did the work, haiku included.
    assert_eq!(
        select(
            &c(1),
            SelectionContext {
                partial: true,
                previous: Some(ModelTier::Haiku),
                round: Some(Round::Conflict),
                ..fresh
            }
        )
        .0,
        ModelTier::Haiku
    );
    let vague = Complexity {
        vague_criteria: true,
        ..c(1)
    };
    assert_eq!(select(&vague, fresh).0, ModelTier::Sonnet);
    let foundation = Complexity {
        foundation: true,
        dependents: 5,
        ..c(1)
    };
    assert_eq!(select(&foundation, fresh).0, ModelTier::Opus);
    let tbd = Complexity {
        open_questions: true,
        ..c(1)
    };
    let (tier, why) = select(&tbd, fresh);
    assert_eq!(tier, ModelTier::Opus);
    assert!(why.contains("open questions"));
}

#[test]
fn the_verification_cascade_favours_partial_over_failure() {
    let p = plan("# X\n\n## Sprint 1: Implement the thing\n- [ ] `make` passes\n");
    let s = &p.work_units[0].sprints[0];
    use cascade::{assess, Outcome};
    let success = || on(s, success());
    assert_eq!(assess(s, &success(), 50), Outcome::Completed);
    assert!(matches!(
        assess(s, &on(s, partial()), 50),
        Outcome::Partial(_)
    ));
    assert!(matches!(assess(s, &failure(), 50), Outcome::Failed(_)));
    // Agent crashed but left commits: preserve the work.
    let mut crashed = failure();
    crashed.evidence.commits = vec!["abc".into()];
    assert!(matches!(assess(s, &crashed, 50), Outcome::Partial(_)));
    // Success claimed but no commit on a code sprint: not complete.
    let mut nocommit = success();
    nocommit.evidence.commits.clear();
    nocommit.evidence.criteria.clear();
    assert!(!matches!(assess(s, &nocommit, 50), Outcome::Completed));
    // Uncommitted changes contradict success.
    let mut dirty = success();
    dirty.evidence.uncommitted = vec!["src/lib.rs".into()];
    assert!(
        matches!(assess(s, &dirty, 50), Outcome::Partial(ref r) if r[0].contains("commit the uncommitted changes"))
    );
    let mut conflict = success();
    conflict.evidence.merge_conflict = Some("src/lib.rs".into());
    // Work that no longer merges is a conflict round, not a failure.
    assert!(matches!(assess(s, &conflict, 50), Outcome::Conflict(ref r) if r == "src/lib.rs"));
}

/// `report` with its criteria results given for `s`'s real criteria.
fn on(s: &supervise::plan::Sprint, mut report: AgentReport) -> AgentReport {
    report.evidence.criteria = for_sprint(s, &report.evidence.criteria);
    report
}

/// A unit as work that appears while the operation runs.
fn added_unit(name: &str, depends_on: Vec<String>, sprints: usize) -> supervise::plan::WorkUnit {
    let src = (1..=sprints).fold(format!("# X\n\n## {name}\n"), |s, i| {
        s + &format!("### Sprint {i}: Step {i}\n- [ ] `{name}-{i}.txt` exists\n")
    });
    let mut u = plan(&src).work_units.remove(0);
    u.name = name.to_string();
    u.depends_on = depends_on;
    u
}

#[test]
fn work_added_while_running_is_run_and_a_finished_operation_takes_it_up_again() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    for unit in ["api", "docs", "api", "web"] {
        sim.finish(unit, success());
    }
    assert_eq!(sim.st().status, OverallStatus::Completed);
    let d = sim
        .send(Input::AddWork {
            units: vec![added_unit("extra", vec!["web".into()], 2)],
        })
        .unwrap();
    assert!(d
        .events
        .iter()
        .any(|e| matches!(e, Event::WorkAdded { .. })));
    assert_eq!(sim.st().status, OverallStatus::Running, "taken up again");
    let order = sim.order_for("extra");
    assert_eq!(order.sprint.as_str(), "1");
    sim.finish("extra", success());
    sim.finish("extra", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    // Replayed from the log, the added unit is there with its history.
    let replayed = OperationState::replay(&sim.log).unwrap();
    assert_eq!(replayed.units.last().unwrap().name, "extra");
    assert_eq!(replayed.unit_slug("extra"), "extra");
    // What cannot be added is refused with the reason, and changes nothing.
    let refused = |sim: &mut Sim, units| match sim.send(Input::AddWork { units }) {
        Err(Refusal::BadWork(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    assert!(refused(&mut sim, vec![added_unit("api", vec![], 1)]).contains("already"));
    assert!(
        refused(&mut sim, vec![added_unit("n", vec!["nowhere".into()], 1)]).contains("not a unit")
    );
    let (a, b) = (
        added_unit("a2", vec!["b2".into()], 1),
        added_unit("b2", vec!["a2".into()], 1),
    );
    assert!(refused(&mut sim, vec![a, b]).contains("cycle"));
    let mut empty = added_unit("e", vec![], 1);
    empty.sprints.clear();
    assert!(refused(&mut sim, vec![empty]).contains("no sprints"));
    assert_eq!(sim.st().units.len(), 4);
}

/// Whether a dispatch is held: `Some(cancelled)` if it is, `None` if not.
fn held(sim: &Sim, d: &DispatchId) -> Option<bool> {
    let (u, s) = sim.st().find_dispatch(d)?;
    let a = sim.st().units[u].sprints[s].active.as_ref()?;
    a.held.as_ref().map(|_| a.cancel.is_some())
}

#[test]
fn a_held_dispatch_waits_with_its_clocks_stopped_and_killall_ends_it_without_a_failure() {
    let cfg = EngineConfig {
        max_agent_secs: 600,
        stall_timeout_secs: 300,
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    let api = sim.order_for("api").dispatch;
    let docs = sim.order_for("docs").dispatch;
    sim.send(Input::DispatchHeld {
        dispatch: docs.clone(),
        reason: "at most 2 agents".into(),
        until: None,
        kind: HoldKind::Agents,
    })
    .unwrap();
    let d = sim
        .send(Input::DispatchHeld {
            dispatch: api.clone(),
            reason: "the installation's daily budget is 100×".into(),
            until: None,
            kind: HoldKind::Budget,
        })
        .unwrap();
    let notices: Vec<_> = d
        .effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Notify {
                    kind: NoticeKind::Held,
                    ..
                }
            )
        })
        .collect();
    assert_eq!(notices.len(), 1, "people are told once: {:?}", d.effects);
    // Asked again on every retry: said once, recorded once.
    let again = sim
        .send(Input::DispatchHeld {
            dispatch: api.clone(),
            reason: "the installation's daily budget is 100×".into(),
            until: None,
            kind: HoldKind::Budget,
        })
        .unwrap();
    assert!(again.events.is_empty() && again.effects.is_empty());
    // Held, nothing runs and nothing is spent: the status says so.
    assert_eq!(sim.st().cost_spent, 0, "held dispatches are not spent");
    assert!(sim.st().cost_held > 0);
    let table = report::status_table(sim.st(), sim.now);
    assert!(table.contains("Active agents: 0"), "{table}");
    assert!(table.contains("cost so far 0×"), "{table}");
    // Hours pass: neither the stall timeout nor the wall-clock cap fires on it.
    for _ in 0..12 {
        sim.advance(1800);
        let t = sim.send(Input::Tick).unwrap();
        assert!(!t
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Cancel { dispatch, .. } if *dispatch == api)));
    }
    assert!(report::status_table(sim.st(), sim.now)
        .contains("waiting to launch: the installation's daily budget is 100×"));
    // Launched: its clocks start now, so the cap counts from here.
    sim.send(Input::DispatchReleased {
        dispatch: api.clone(),
    })
    .unwrap();
    let api_cost = sim.st().cost_spent;
    assert!(api_cost > 0, "launched: spent");
    sim.advance(590);
    sim.send(Input::AgentActivity {
        dispatch: api.clone(),
    })
    .unwrap();
    let t = sim.send(Input::Tick).unwrap();
    assert!(
        !t.effects.iter().any(|e| matches!(e, Effect::Cancel { .. })),
        "590 s of a 600 s cap"
    );
    // The other dispatch held from the start, then killall: never launched,
    // no attempt charged.
    sim.send(Input::Killall).unwrap();
    sim.send(Input::DispatchFailed {
        dispatch: docs,
        error: "cancelled before it was launched".into(),
    })
    .unwrap();
    let sp = &sim.unit("docs").sprints[0];
    assert_eq!(sp.failures, 0, "cancelled before launch is no failure");
    assert_eq!(sp.history.last().unwrap().outcome, "terminated");
    assert_eq!(sim.st().cost_held, 0);
    assert_eq!(
        sim.st().cost_spent,
        api_cost,
        "the one never launched costs nothing"
    );
}

/// However many sprints wait for the same cap, people are told once; a
/// sprint that moves from waiting for a slot to waiting for the daily budget
/// (hours, not minutes) is news, told once more.
#[test]
fn one_notice_per_cap_however_many_sprints_wait() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let api = sim.order_for("api").dispatch;
    let docs = sim.order_for("docs").dispatch;
    let notices = |d: &Decision| {
        d.effects
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Effect::Notify {
                        kind: NoticeKind::Held,
                        ..
                    }
                )
            })
            .count()
    };
    let hold = |sim: &mut Sim, d: &DispatchId, reason: &str, kind| {
        sim.send(Input::DispatchHeld {
            dispatch: d.clone(),
            reason: reason.into(),
            until: None,
            kind,
        })
        .unwrap()
    };
    let first = hold(
        &mut sim,
        &api,
        "20 agents in flight; 0 waiting ahead",
        HoldKind::Agents,
    );
    assert_eq!(notices(&first), 1);
    let second = hold(
        &mut sim,
        &docs,
        "20 agents in flight; 1 waiting ahead",
        HoldKind::Agents,
    );
    assert_eq!(notices(&second), 0, "the same cap: already said");
    let moved = hold(&mut sim, &docs, "the daily budget is 50×", HoldKind::Budget);
    assert_eq!(notices(&moved), 1, "a longer wait is news");
    let follows = hold(
        &mut sim,
        &api,
        "the daily budget is 50×; 50× spent",
        HoldKind::Budget,
    );
    assert_eq!(notices(&follows), 0);
}

// ---- property tests ------------------------------------------------------------

#[derive(Debug, Clone)]
enum Step {
    Finish(usize, u8),
    Tick(u16),
    Stop,
    Killall,
    Resume,
    Gate(bool),
    /// A cap above the operation holds a dispatch not yet launched…
    Hold(usize),
    /// …until it is launched, or found cancelled (then never launched).
    Release(usize),
    /// Work appears: a unit of 1–2 sprints, depending on an existing unit.
    AddWork(usize, u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0usize..4, 0u8..4).prop_map(|(i, k)| Step::Finish(i, k)),
        2 => (0u16..2000).prop_map(Step::Tick),
        1 => Just(Step::Stop),
        1 => Just(Step::Killall),
        2 => Just(Step::Resume),
        1 => any::<bool>().prop_map(Step::Gate),
        1 => (0usize..4).prop_map(Step::Hold),
        1 => (0usize..4).prop_map(Step::Release),
        1 => (0usize..8, 1u8..3).prop_map(|(d, n)| Step::AddWork(d, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_event_sequences_keep_every_invariant(steps in prop::collection::vec(step(), 1..80), gate in any::<bool>(), cap in 1u32..4) {
        let cfg = EngineConfig {
            build_gate: gate,
            max_parallel: std::num::NonZeroU32::new(cap).unwrap(),
            stall_timeout_secs: 900,
            ..Default::default()
        };
        let mut sim = Sim::start(THREE_UNITS, cfg);
        for st in steps {
            match st {
                Step::Finish(i, k) => {
                    let out = sim.out();
                    // A held dispatch was never launched: it cannot finish.
                    let active: Vec<_> = out.iter().filter(|o| sim.st().find_dispatch(&o.dispatch).is_some() && held(&sim, &o.dispatch).is_none()).collect();
                    if let Some(o) = active.get(i % active.len().max(1)) {
                        let r = match k { 0 => success(), 1 => partial(), 2 => failure(), _ => AgentReport { exit_code: None, ..Default::default() } };
                        let _ = sim.send(Input::AgentFinished { dispatch: o.dispatch.clone(), report: r });
                    }
                }
                Step::Tick(s) => { sim.advance(s as i64); let _ = sim.send(Input::Tick); }
                Step::Stop => { let _ = sim.send(Input::Stop); }
                Step::Killall => { let _ = sim.send(Input::Killall); }
                Step::Resume => { let _ = sim.send(Input::Resume { unit: None }); }
                Step::Hold(i) => {
                        let out = sim.out();
                        if let Some(o) = out.get(i % out.len().max(1)) {
                            let _ = sim.send(Input::DispatchHeld { dispatch: o.dispatch.clone(), reason: "the daily budget".into(), until: None, kind: HoldKind::Budget });
                        }
                }
                Step::AddWork(dep, n) => {
                    let existing: Vec<String> = sim.st().units.iter().map(|u| u.name.clone()).collect();
                    let name = format!("extra{}", existing.len());
                    let depends_on = vec![existing[dep % existing.len()].clone()];
                    let _ = sim.send(Input::AddWork { units: vec![added_unit(&name, depends_on, n as usize)] });
                }
                Step::Release(i) => {
                    let out: Vec<_> = sim.out().into_iter().filter(|o| held(&sim, &o.dispatch) == Some(false)).collect();
                    let cancelled: Vec<_> = sim.out().into_iter().filter(|o| held(&sim, &o.dispatch) == Some(true)).collect();
                    if let Some(o) = cancelled.first() {
                        let _ = sim.send(Input::DispatchFailed { dispatch: o.dispatch.clone(), error: "cancelled before it was launched".into() });
                    } else if let Some(o) = out.get(i % out.len().max(1)) {
                        let _ = sim.send(Input::DispatchReleased { dispatch: o.dispatch.clone() });
                    }
                }
                Step::Gate(p) => {
                    if let Some(g) = sim.st().gates.iter().find(|g| g.passed.is_none()).map(|g| g.id) {
                        let _ = sim.send(Input::GateResult { gate: g, passed: p, output: "x".into(), blame: Default::default() });
                    }
                }
            }
            for u in &sim.st().units {
                for s in &u.sprints {
                    prop_assert!(s.failures <= sim.st().config.max_retries);
                    // A cancel never waits on a held dispatch's clocks, and a
                    // held one is never stopped for stalling or the wall clock.
                    if let Some(a) = &s.active {
                        prop_assert!(!(a.held.is_some() && matches!(a.cancel, Some(CancelReason::Stalled | CancelReason::WallClock))));
                    }
                }
                prop_assert!(u.sprints.iter().filter(|s| s.active.is_some()).count() <= 1);
            }
            // The table's count of blocked units is the rows it shows BLOCKED.
            let table = report::status_table(sim.st(), sim.now);
            let rows = table.lines().filter(|l| l.split('|').nth(3).is_some_and(|c| c.trim() == "BLOCKED")).count();
            let said = table.lines().find_map(|l| l.strip_prefix("Blocked work units: ")).and_then(|n| n.trim().parse::<usize>().ok());
            prop_assert_eq!(said, Some(rows), "{}", table);
            // What held dispatches would cost is exactly what is set apart.
            let held_now: u64 = sim.st().units.iter().flat_map(|u| &u.sprints).filter_map(|s| s.active.as_ref()).filter(|a| a.held.is_some()).map(|a| a.cost).sum();
            prop_assert_eq!(sim.st().cost_held, held_now);
            prop_assert!(sim.st().active_count() <= cap as usize + 2, "cap respected (killed agents may linger until they report)");
            // What the state keeps between decisions (the graph, the
            // remaining paths) is what a state without it, as read back
            // from the store, finds afresh.
            let fresh: OperationState = serde_json::from_value(serde_json::to_value(sim.st()).unwrap()).unwrap();
            prop_assert_eq!(&sim.st().graph().deps, &fresh.graph().deps);
            prop_assert_eq!(sim.st().remaining_paths(), fresh.remaining_paths());
            prop_assert_eq!(sim.st().ready_to_start(), fresh.ready_to_start());
        }
    }
}

#[test]
fn a_unit_whose_dependencies_complete_after_another_unit_blocks_still_starts() {
    // A (2 sprints) and B (1) are independent; C needs B, D needs A. B is BLOCKED
    // while A's second sprint runs; A then completes and D must start.
    let src = "# Four\n\n| Work Unit | Dependencies |\n|---|---|\n| a | none |\n| b | none |\n| c | b |\n| d | a |\n\n\
## a\n### Sprint 1: One\n- [ ] `make a1` passes\n### Sprint 2: Two\n- [ ] `make a2` passes\n\
## b\n### Sprint 1: One\n- [ ] `make b` passes\n\
## c\n### Sprint 1: One\n- [ ] `make c` passes\n\
## d\n### Sprint 1: One\n- [ ] `make d` passes\n";
    let mut sim = Sim::start(src, EngineConfig::default());
    sim.finish("a", success());
    for _ in 0..3 {
        sim.finish("b", failure());
    }
    assert_eq!(sim.unit("b").status, UnitStatus::Blocked);
    sim.finish("a", success());
    assert_eq!(sim.unit("a").status, UnitStatus::Completed);
    assert_eq!(
        sim.unit("d").status,
        UnitStatus::Running,
        "d's dependency completed"
    );
    assert_eq!(sim.st().status, OverallStatus::Running);
    sim.finish("d", success());
    assert_eq!(sim.unit("c").status, UnitStatus::NotStarted);
    assert_eq!(
        sim.st().status,
        OverallStatus::Blocked,
        "only c (behind BLOCKED b) is left"
    );
}

/// A random plan: `n` units, each with 1–3 sprints and dependencies on a random
/// subset of the units before it, as a Dependencies column.
fn random_plan() -> impl Strategy<Value = String> {
    (2usize..7)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(1usize..4, n),
                prop::collection::vec(any::<u8>(), n),
            )
        })
        .prop_map(|(sprints, deps)| {
            let n = sprints.len();
            let mut src = String::from("# Random\n\n| Work Unit | Dependencies |\n|---|---|\n");
            for (i, mask) in deps.iter().enumerate() {
                let d: Vec<String> = (0..i)
                    .filter(|j| mask & (1 << j) != 0)
                    .map(|j| format!("u{j}"))
                    .collect();
                let d = if d.is_empty() {
                    "none".to_string()
                } else {
                    d.join(", ")
                };
                src.push_str(&format!("| u{i} | {d} |\n"));
            }
            for (i, count) in sprints.iter().enumerate().take(n) {
                src.push_str(&format!("\n## u{i}\n"));
                for s in 1..=*count {
                    src.push_str(&format!(
                        "### Sprint {s}: Step {s}\n- [ ] `make u{i}-{s}` passes\n"
                    ));
                }
            }
            src
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// Liveness on random plans and random outcome orders (checked by the
    /// harness after every decision): a ready unit always starts, and once every
    /// agent has reported the operation is COMPLETED or BLOCKED with every
    /// unfinished unit BLOCKED or behind one that is.
    #[test]
    fn random_plans_and_outcomes_never_strand_a_ready_unit(src in random_plan(), outcomes in prop::collection::vec((0usize..8, 0u8..5), 1..120), cap in 1u32..4, gate in any::<bool>()) {
        let cfg = EngineConfig {
            max_parallel: std::num::NonZeroU32::new(cap).unwrap(),
            build_gate: gate,
            ..Default::default()
        };
        let mut sim = Sim::start(&src, cfg);
        let report = |k: u8| match k { 0 | 1 => success(), 2 => partial(), 3 => failure(), _ => AgentReport { exit_code: None, ..Default::default() } };
        let mut outcomes = outcomes.into_iter().cycle().take(2000);
        loop {
            if let Some(g) = sim.st().gates.iter().find(|g| g.passed.is_none()).map(|g| g.id) {
                let (_, k) = outcomes.next().unwrap();
                sim.send(Input::GateResult { gate: g, passed: k != 3, output: "x".into(), blame: Default::default() }).unwrap();
                continue;
            }
            let out = sim.out();
            if out.is_empty() { break; }
            let Some((i, k)) = outcomes.next() else { break };
            let o = &out[i % out.len()];
            sim.now += chrono::Duration::minutes(3);
            sim.send(Input::AgentFinished { dispatch: o.dispatch.clone(), report: report(k) }).unwrap();
        }
        let st = sim.st();
        // The final report agrees with the events: the cost of the attempts
        // by model adds up to what was spent, and no efficiency is over 100%.
        let complete = supervise::report::complete_md(st, sim.now);
        let table = complete.split("### By Model").nth(1).unwrap_or("").split("\n\n").next().unwrap_or("");
        let costs: u64 = table
            .lines()
            .skip(3)
            .filter_map(|l| l.trim_end_matches('|').rsplit('|').next())
            .filter_map(|c| c.trim().trim_end_matches('×').parse::<u64>().ok())
            .sum();
        if complete.contains("### By Model") {
            prop_assert_eq!(costs, st.cost_spent, "{}", table);
        }
        // Both reports of efficiency print the same figure, at most 100%.
        let summary = supervise::report::final_summary(st, &supervise::report::complete_file_name(st));
        let pct = |text: &str, label: &str| -> Option<f64> {
            text.split(label).nth(1).map(|e| e.split('%').next().unwrap().parse().unwrap())
        };
        let in_report = pct(&complete, "**Parallelism efficiency**: ");
        if let Some(p) = in_report {
            prop_assert!(p <= 100.0, "efficiency {p}%");
        }
        if st.status == OverallStatus::Completed {
            prop_assert_eq!(in_report, pct(&summary, "- Parallelism efficiency: "), "{}\n----\n{}", complete, summary);
        }
        // spend's row is what the state says was spent.
        let rows = supervise::report::spend(std::slice::from_ref(st), sim.now);
        prop_assert_eq!(rows[0].total, st.cost_spent);
        // The table's BLOCKED rows are the count beneath it.
        let table = supervise::report::status_table(st, sim.now);
        let blocked_rows = table.lines().filter(|l| l.starts_with('|') && l.contains("| BLOCKED |")).count();
        let blocked_line = format!("Blocked work units: {blocked_rows}");
        prop_assert!(table.contains(&blocked_line), "{}", table);
        if sim.out().is_empty() && st.gates.iter().all(|g| g.passed.is_some()) {
            prop_assert!(matches!(st.status, OverallStatus::Completed | OverallStatus::Blocked), "ended {}", st.status);
            for (u, unit) in st.units.iter().enumerate() {
                let behind_blocked = |u: usize| st.plan.work_units[u].depends_on.iter().any(|d| st.units[st.unit_index(d).unwrap()].status != UnitStatus::Completed);
                prop_assert!(matches!(unit.status, UnitStatus::Completed | UnitStatus::Blocked) || (unit.status == UnitStatus::NotStarted && behind_blocked(u)), "{} ended {}", unit.name, unit.status);
            }
        }
    }
}

#[test]
fn only_a_first_sprint_is_told_it_has_no_entry_criteria() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    assert!(sim
        .order_for("api")
        .prompt
        .contains("None — this is the first sprint"));
    sim.finish("api", success());
    let second = sim.order_for("api").prompt;
    assert!(!second.contains("this is the first sprint"), "{second}");
    assert!(
        second.contains("Sprint 1 (Create the API types) is COMPLETED"),
        "{second}"
    );
    // web waited for api and docs: its first sprint is told so.
    sim.finish("api", success());
    sim.finish("docs", success());
    let web = sim.order_for("web").prompt;
    assert!(
        web.contains("the work units it depends on (api, docs) are COMPLETED and merged"),
        "{web}"
    );
}

#[test]
fn a_seed_001_template_is_filled_whole_or_its_gaps_are_reported() {
    let src = "# Verifier\n\n| Package | Layer |\n|---|---|\n| parser | 0 |\n| profiles | 1 |\n\n\
## 8. parser Sprints\n### Sprint 1: Types\n- [ ] `swift test` passes\n\n\
## 9. profiles Sprints\n### Sprint 1: Profiles\n- [ ] `swift test` passes\n\n\
## Appendix D: Sprint Dispatch Template\n```\nYou are working on package <PACKAGE_NAME> at $PROJECT_ROOT/<PACKAGE_DIR>/. Execute Sprint <N>: <SPRINT_NAME> as listed in Section <8|9|10|11|12> of EXECUTION_PLAN.md.\n```\n";
    let p = plan(src);
    assert_eq!(p.work_units[0].section.as_deref(), Some("8"));
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    let sim = Sim::start(src, EngineConfig::default());
    let prompt = sim.order_for("parser").prompt;
    assert!(
        prompt.contains("Execute Sprint 1: Types as listed in Section 8 of"),
        "{prompt}"
    );
    assert!(!prompt.contains('<'), "{prompt}");

    let unknown = src.replace("Execute Sprint", "Ticket <TICKET_ID>. Execute Sprint");
    let p = plan(&unknown);
    assert!(
        p.warnings.iter().any(|w| w
            .message
            .contains("`<TICKET_ID>` cannot be filled for parser, profiles")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn failure_words_count_only_in_the_agents_own_unnegated_words() {
    let p = plan("# X\n\n## Sprint 1: Review the docs\n- [ ] The guide reads well to a newcomer\n");
    let s = &p.work_units[0].sprints[0];
    use cascade::{assess, Outcome};
    let said = |text: &str| {
        let mut r = success();
        r.evidence.criteria.clear();
        r.output_tail = text.into();
        assess(s, &r, 50)
    };
    for fine in [
        "Reviewed every page: no errors found.",
        "0 failed, 12 passed. Committed.",
        "The build wasn't blocked at any point; done.",
        "I ran `grep -r error src` and fixed the wording.",
        "The log said:\n> error: old message\nThat is fixed now.",
        "```\nerror[E0425]: cannot find value\n```\nFixed it and committed.",
        "Nothing remaining; the guide is done.",
        "Done. I also improved the error handling.",
        "Done; the failed login attempts are now logged and the error messages say why.",
    ] {
        assert_eq!(said(fine), Outcome::Completed, "{fine:?}");
    }
    // A failure word naming a kind of thing is what the agent worked on, for
    // each such noun; alone at the end of a sentence it still fails.
    for noun in [
        "handling",
        "messages",
        "paths",
        "types",
        "reporting",
        "codes",
    ] {
        let text = format!("Done. I reworked the error {noun}.");
        assert_eq!(said(&text), Outcome::Completed, "{text:?}");
    }
    assert!(matches!(said("Done, then an error."), Outcome::Partial(_)));
    assert!(matches!(
        said("The build failed twice and I could not fix it."),
        Outcome::Partial(_)
    ));
    assert!(matches!(said("Two pages remaining."), Outcome::Partial(_)));
}

fn words() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "failed",
            "error",
            "errors",
            "blocked",
            "could not",
            "completed",
            "done",
            "partial",
            "remaining",
            "no errors",
            "all checks pass",
            "committed",
            "the",
            "tests",
            "`error`",
            "\n> failed\n",
            "\n```\nerror\n```\n",
            "0 failed",
        ]),
        0..12,
    )
    .prop_map(|w| w.join(" "))
}

proptest! {
    /// Exit criteria outweigh words both ways: whatever the agent says, passing
    /// criteria with a commit complete the sprint and a failing one never does.
    #[test]
    fn exit_criteria_outweigh_the_agents_words(text in words()) {
        let p = plan("# X\n\n## Sprint 1: Implement the thing\n- [ ] `make` passes\n");
        let s = &p.work_units[0].sprints[0];
        let mut pass = on(s, success());
        pass.output_tail = text.clone();
        prop_assert_eq!(cascade::assess(s, &pass, 50), cascade::Outcome::Completed);
        let mut fail = on(s, partial());
        fail.output_tail = text;
        prop_assert_ne!(cascade::assess(s, &fail, 50), cascade::Outcome::Completed);
    }
}

#[test]
fn a_gate_failure_that_names_no_unit_runs_the_gate_again_before_charging_anyone() {
    let cfg = EngineConfig {
        build_gate: true,
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    sim.finish("api", success());
    sim.finish("docs", success());
    sim.finish("api", success());
    let gate = sim.st().gates.last().unwrap().id;
    let d = sim
        .send(Input::GateResult {
            gate,
            passed: false,
            output: "linker was killed (signal 9)".into(),
            blame: Default::default(),
        })
        .unwrap();
    let rerun = d
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::RunGate { gate, units, .. } => Some((*gate, units.clone())),
            _ => None,
        })
        .expect("the gate runs again");
    assert_eq!(rerun.1, ["api", "docs"]);
    assert!(
        sim.st()
            .units
            .iter()
            .all(|u| u.sprints.iter().all(|s| s.failures == 0)),
        "nobody charged yet"
    );
    sim.send(Input::GateResult {
        gate: rerun.0,
        passed: false,
        output: "linker was killed (signal 9)".into(),
        blame: Default::default(),
    })
    .unwrap();
    assert_eq!(
        sim.unit("api").sprints[1].failures,
        1,
        "the second failure charges the phase"
    );
    assert_eq!(sim.unit("docs").sprints[0].failures, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Merges confirmed late, in any order, or refused (and then fixed by a
    /// person's `resume`): the harness checks after every decision that no
    /// sprint is dispatched while an earlier sprint of its unit waits for its
    /// merge and that no unit completes (so no dependent starts) before its
    /// merges are confirmed; and the operation still ends.
    #[test]
    fn no_work_branches_from_an_integration_branch_missing_a_merge(src in random_plan(), steps in prop::collection::vec((0usize..8, 0u8..6), 1..200), cap in 1u32..4) {
        let cfg = EngineConfig {
            max_parallel: std::num::NonZeroU32::new(cap).unwrap(),
            ..Default::default()
        };
        let mut sim = Sim::start(&src, cfg);
        sim.auto_merge = false;
        let mut seen = 0;
        let mut merges: Vec<(String, supervise::plan::SprintId)> = Vec::new();
        let mut steps = steps.into_iter().cycle().take(3000);
        loop {
            merges.extend(sim.effects[seen..].iter().filter_map(|e| match e {
                Effect::Integrate { unit, sprint, .. } => Some((unit.clone(), sprint.clone())),
                _ => None,
            }));
            seen = sim.effects.len();
            let out = sim.out();
            if out.is_empty() && merges.is_empty() { break; }
            let Some((i, k)) = steps.next() else { break };
            sim.now += chrono::Duration::minutes(3);
            match k {
                0..=2 if !out.is_empty() => {
                    let o = &out[i % out.len()];
                    let report = if k == 2 { failure() } else { success() };
                    sim.send(Input::AgentFinished { dispatch: o.dispatch.clone(), report }).unwrap();
                }
                4 if !merges.is_empty() => {
                    let (unit, sprint) = merges.remove(i % merges.len());
                    sim.send(Input::IntegrationFailed { unit: unit.clone(), sprint, error: "conflict".into() }).unwrap();
                    prop_assert_eq!(sim.unit(&unit).status, UnitStatus::Blocked);
                    sim.send(Input::Resume { unit: Some(unit) }).unwrap();
                }
                _ if !merges.is_empty() => {
                    let (unit, sprint) = merges.remove(i % merges.len());
                    sim.send(Input::Integrated { unit, sprint }).unwrap();
                }
                _ => {
                    let o = &out[i % out.len()];
                    sim.send(Input::AgentFinished { dispatch: o.dispatch.clone(), report: success() }).unwrap();
                }
            }
        }
        let st = sim.st();
        if sim.out().is_empty() && merges.is_empty() {
            prop_assert!(matches!(st.status, OverallStatus::Completed | OverallStatus::Blocked), "ended {}", st.status);
            for unit in &st.units {
                if unit.status == UnitStatus::Completed {
                    prop_assert!(unit.awaiting_merge().is_none());
                }
            }
        }
    }
}

#[test]
fn a_merge_that_needs_a_person_blocks_its_unit_until_resume_merges_it() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.auto_merge = false;
    let d = sim.finish("api", success());
    assert!(d
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Integrate { unit, .. } if unit == "api")));
    assert!(
        sim.out().iter().all(|o| o.unit != "api"),
        "api Sprint 2 waits for Sprint 1's merge"
    );
    let d = sim
        .send(Input::IntegrationFailed {
            unit: "api".into(),
            sprint: supervise::plan::SprintId::parse("1").unwrap(),
            error: "pull request #4 no longer merges".into(),
        })
        .unwrap();
    assert_eq!(sim.unit("api").status, UnitStatus::Blocked);
    assert!(d.effects.iter().any(|e| matches!(e,
        Effect::Notify { kind: NoticeKind::Blocked, text, .. } if text.contains("no longer merges") && text.contains("supervise resume api"))));
    let d = sim
        .send(Input::Resume {
            unit: Some("api".into()),
        })
        .unwrap();
    assert!(
        d.effects
            .iter()
            .any(|e| matches!(e, Effect::Integrate { unit, .. } if unit == "api")),
        "resume asks for the merge again"
    );
    assert!(sim.out().iter().all(|o| o.unit != "api"));
    sim.send(Input::Integrated {
        unit: "api".into(),
        sprint: supervise::plan::SprintId::parse("1").unwrap(),
    })
    .unwrap();
    assert_eq!(sim.order_for("api").sprint.as_str(), "2");
    // Confirming twice changes nothing.
    let again = sim
        .send(Input::Integrated {
            unit: "api".into(),
            sprint: supervise::plan::SprintId::parse("1").unwrap(),
        })
        .unwrap();
    assert!(again.events.is_empty() && again.effects.is_empty());
}

#[test]
fn when_the_cap_binds_the_longest_remaining_path_goes_first_and_the_log_says_why() {
    let src = "# P\n\n| Work Unit | Dependencies |\n|---|---|\n| short | none |\n| long | none |\n| after | long |\n\n\
## short\n### Sprint 1: One\n- [ ] `make s1` passes\n\
## long\n### Sprint 1: One\n- [ ] `make l1` passes\n### Sprint 2: Two\n- [ ] `make l2` passes\n\
## after\n### Sprint 1: One\n- [ ] `make a1` passes\n";
    let cfg = EngineConfig {
        max_parallel: std::num::NonZeroU32::new(1).unwrap(),
        ..Default::default()
    };
    let sim = Sim::start(src, cfg);
    let out = sim.out();
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].unit, "long",
        "3 sprints wait on `long`, 1 on `short`"
    );
    assert!(sim
        .st()
        .decisions
        .iter()
        .any(|d| d.unit.as_deref() == Some("long")
            && d.rationale.contains("longest remaining path (3 sprints)")));
    // With room for everyone, plan order and no such note.
    let cfg = EngineConfig {
        max_parallel: std::num::NonZeroU32::new(4).unwrap(),
        ..Default::default()
    };
    let sim = Sim::start(src, cfg);
    assert_eq!(
        sim.out()
            .iter()
            .map(|o| o.unit.as_str())
            .collect::<Vec<_>>(),
        ["short", "long"]
    );
    assert!(!sim
        .st()
        .decisions
        .iter()
        .any(|d| d.rationale.contains("longest remaining path")));
}

#[test]
fn an_agent_that_keeps_printing_is_stopped_at_its_wall_clock_cap_and_the_attempt_fails() {
    let cfg = EngineConfig {
        max_agent_secs: 600,
        stall_timeout_secs: 300,
        ..Default::default()
    };
    let mut sim = Sim::start(THREE_UNITS, cfg);
    let api = sim.order_for("api").dispatch;
    // Busy all along: never stalled, but never done.
    for _ in 0..9 {
        sim.advance(60);
        sim.send(Input::AgentActivity {
            dispatch: api.clone(),
        })
        .unwrap();
        let d = sim.send(Input::Tick).unwrap();
        assert!(!d
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Cancel { dispatch, .. } if *dispatch == api)));
    }
    sim.advance(60);
    sim.send(Input::AgentActivity {
        dispatch: api.clone(),
    })
    .unwrap();
    let d = sim.send(Input::Tick).unwrap();
    assert!(
        d.effects.contains(&Effect::Cancel {
            dispatch: api.clone(),
            force: true
        }),
        "stopped at 10 min, a hard stop"
    );
    // A second tick does not cancel twice.
    let again = sim.send(Input::Tick).unwrap();
    assert!(!again
        .effects
        .iter()
        .any(|e| matches!(e, Effect::Cancel { .. })));
    sim.send(Input::AgentFinished {
        dispatch: api,
        report: AgentReport {
            exit_code: None,
            ..Default::default()
        },
    })
    .unwrap();
    let sp = &sim.unit("api").sprints[0];
    assert_eq!(sp.failures, 1, "the attempt counts as failed");
    assert_eq!(
        sp.history.last().unwrap().outcome,
        "stopped: wall-clock cap"
    );
    assert!(sp
        .last_failure
        .as_deref()
        .is_some_and(|f| f.contains("wall-clock cap of 10 min")));
    // Retried on a stronger model, the failure in its prompt.
    let retry = sim.order_for("api");
    assert_eq!(retry.attempt, 2);
    assert!(retry.prompt.contains("wall-clock cap"));
}

/// The log as it is stored (JSON) replays to the state the engine holds: a
/// field the store drops would be lost at the first restart — the sprint's
/// own text was, and prompts after a restart went out without the assignment.
#[test]
fn the_stored_log_replays_to_the_same_state_and_the_same_prompts() {
    let src = THREE_UNITS.replace(
        "### Sprint 1: Create the API types\n",
        "### Sprint 1: Create the API types\nWrite `Order` and `Line` in src/types.rs.\n",
    );
    let mut sim = Sim::start(&src, EngineConfig::default());
    let first = sim.order_for("api");
    assert!(first.prompt.contains("Write `Order` and `Line`"));
    sim.finish("api", failure());
    let stored: Vec<Event> = sim
        .log
        .iter()
        .map(|e| serde_json::from_str(&serde_json::to_string(e).unwrap()).unwrap())
        .collect();
    let mut replayed = Some(OperationState::replay(&stored).unwrap());
    assert_eq!(replayed.as_ref(), sim.state.as_ref());
    // The next retry, decided by a restarted supervisor, still carries the assignment.
    let out = sim.order_for("api");
    let d = decide_mut(
        &mut replayed,
        Input::AgentFinished {
            dispatch: out.dispatch,
            report: failure(),
        },
        sim.now,
    )
    .unwrap();
    let retry = d
        .effects
        .iter()
        .find_map(|e| match e {
            Effect::Dispatch(o) => Some(o.clone()),
            _ => None,
        })
        .expect("a retry is dispatched");
    assert_eq!(retry.attempt, 3);
    assert!(
        retry.prompt.contains("Write `Order` and `Line`"),
        "{}",
        retry.prompt
    );
}

/// The service shares an operation's state with the web view and with a
/// status being published. A decision that changes it copies it, leaving
/// the readers the version they read, and decides exactly as on a state of
/// its own; one that changes nothing (most ticks) copies nothing.
#[test]
fn a_shared_state_is_copied_only_by_a_decision_that_changes_it() {
    use std::sync::Arc;
    let sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let out = sim.order_for("api");
    let mut shared = sim.state.clone().map(Arc::new);
    let reader = shared.clone().expect("started");

    let d = decide_shared(&mut shared, Input::Tick, sim.now).unwrap();
    assert!(d.events.is_empty(), "{d:?}");
    assert!(
        Arc::ptr_eq(&reader, shared.as_ref().unwrap()),
        "a tick with nothing due copied the state"
    );

    let finished = Input::AgentFinished {
        dispatch: out.dispatch,
        report: failure(),
    };
    let mut own = sim.state.clone();
    let expected = decide_mut(&mut own, finished.clone(), sim.now).unwrap();
    let got = decide_shared(&mut shared, finished, sim.now).unwrap();
    assert!(!got.events.is_empty());
    assert_eq!(got, expected);
    assert_eq!(shared.as_deref(), own.as_ref());
    assert!(!Arc::ptr_eq(&reader, shared.as_ref().unwrap()));
    assert_eq!(
        Some(&*reader),
        sim.state.as_ref(),
        "the reader's version changed under it"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    /// `UnitGraph::dependents_of` is the transitive closure of "waits for": a unit
    /// is in it exactly when one of its dependencies is the unit itself or is
    /// in it — checked against that definition, iterated to its fixpoint.
    #[test]
    fn dependents_are_exactly_the_units_that_wait_directly_or_not(src in random_plan()) {
        let plan = supervise::plan::parse(&src, "random").expect("a valid plan");
        let units = &plan.work_units;
        for start in 0..units.len() {
            let mut waits = vec![false; units.len()];
            loop {
                let mut changed = false;
                for (v, u) in units.iter().enumerate() {
                    let on_it = u.depends_on.iter().any(|d| {
                        let i = units.iter().position(|x| &x.name == d).expect("a known unit");
                        i == start || waits[i]
                    });
                    if on_it && !waits[v] {
                        waits[v] = true;
                        changed = true;
                    }
                }
                if !changed { break; }
            }
            let expected: Vec<usize> = (0..units.len()).filter(|&v| waits[v]).collect();
            prop_assert_eq!(plan.graph().dependents_of(start), expected, "dependents of {}", units[start].name);
        }
    }
}

/// A long chain of units is read (its layers) and ordered (the longest-path
/// order) without recursion: two chains of 3,000 units with a cap of one
/// (so both heads wait for one place) are read and started on a thread with
/// a 128 KiB stack, which each recursive walk overflowed (an abort, not a
/// panic: a crafted plan took the service down). Chain `a` runs down the
/// plan and chain `b` up it: each walk went deep on one of the two orders.
#[test]
fn a_long_chain_is_ordered_without_overflowing_a_small_stack() {
    let n = 3000;
    let mut src = String::from("# Chains\n\n| Work Unit | Dependencies |\n|---|---|\n");
    src.push_str("| a0 | — |\n");
    for i in 1..n {
        src.push_str(&format!("| a{i} | a{} |\n", i - 1));
    }
    for i in 0..n - 1 {
        src.push_str(&format!("| b{i} | b{} |\n", i + 1));
    }
    src.push_str(&format!("| b{} | — |\n", n - 1));
    for c in ["a", "b"] {
        for i in 0..n {
            src.push_str(&format!(
                "\n## {c}{i}\n### Sprint 1: Implement part\n- [ ] `make {c}{i}` passes\n"
            ));
        }
    }
    let dispatched = std::thread::Builder::new()
        .stack_size(128 << 10)
        .spawn(move || {
            let plan = supervise::plan::parse(&src, "chains").expect("a valid plan");
            assert_eq!(plan.work_units[n - 1].layer as usize, n - 1, "a's last");
            assert_eq!(plan.work_units[n].layer as usize, n - 1, "b's first");
            let mut state = None;
            let d = decide_mut(
                &mut state,
                Input::Start {
                    operation: OperationId("op".into()),
                    plan: Box::new(plan),
                    config: EngineConfig {
                        max_parallel: std::num::NonZeroU32::new(1).unwrap(),
                        ..Default::default()
                    },
                    seed: 1,
                    workflow: None,
                    already_done: Vec::new(),
                },
                Utc::now(),
            )
            .expect("started");
            let paths = state.as_ref().unwrap().remaining_paths();
            let units: Vec<String> = d
                .effects
                .iter()
                .filter_map(|e| match e {
                    Effect::Dispatch(o) => Some(o.unit.clone()),
                    _ => None,
                })
                .collect();
            (units, paths[0], paths[2 * n - 1])
        })
        .unwrap()
        .join()
        .expect("no overflow");
    assert_eq!(
        dispatched.0,
        vec!["a0".to_string()],
        "one place, plan order among equals"
    );
    assert_eq!(
        (dispatched.1, dispatched.2),
        (n, n),
        "each head carries its whole chain"
    );
}

/// An agent command the shell cannot run (exit 127) spent nothing: the
/// state takes its cost back and the places are told to take it out of their
/// own ledgers (the service's daily caps), so both agree.
#[test]
fn an_agent_command_that_cannot_run_is_refunded_everywhere() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let before = sim.st().cost_spent;
    let api = sim.order_for("api").dispatch;
    let d = sim.finish(
        "api",
        AgentReport {
            exit_code: Some(127),
            output_tail: "sh: agent: not found".into(),
            ..Default::default()
        },
    );
    assert!(
        d.effects.contains(&Effect::Refund {
            dispatch: api.clone()
        }),
        "{:?}",
        d.effects
    );
    let api_cost = sim
        .st()
        .config
        .cost(sim.unit("api").sprints[0].history[0].tier);
    assert_eq!(sim.st().cost_spent, before - api_cost);
}

/// A place that says it found a sprint's work, with checks that do not show
/// it, has its word refused: nothing is paid, nothing completes, and the
/// sprint goes to an agent.
#[test]
fn a_found_done_claim_without_evidence_is_refused_unpaid_and_run_by_an_agent() {
    let plan = "# X\n\n## Sprint 1: Implement it\n- [ ] `make` passes\n";
    let mut sim = Sim::start(plan, EngineConfig::default());
    let order = sim.order_for("X");
    let mut claim = success();
    claim.evidence.criteria = for_sprint(
        &sim.st().plan.work_units[0].sprints[0],
        &claim.evidence.criteria,
    );
    claim.evidence.commits.clear();
    // `make` passed, but nothing says it failed at the start: no evidence.
    claim.evidence.found_done = Some(FoundDone {
        head: "0123456789abcdef".into(),
        by: "a guess".into(),
        failed_at_start: Vec::new(),
    });
    sim.finish_as_is("X", claim);
    let s = &sim.unit("X").sprints[0];
    assert!(s.completion.is_none());
    assert_eq!(s.history[0].outcome, NOT_SHOWN_DONE);
    assert!(!s.history[0].charged);
    let again = sim.order_for("X");
    assert_eq!(
        sim.st().cost_spent,
        sim.st().config.cost(again.tier),
        "the refused claim cost nothing; the retry is paid for"
    );
    assert_ne!(again.dispatch, order.dispatch);
    assert_eq!(
        again.kind,
        DispatchKind::Retry,
        "a retry, which no place skips"
    );
}

/// The final head's re-verification decides the verdict: a criterion that
/// fails there is a regression, named with the merge that broke it, and the
/// notice's next step works when typed (a name with a space is quoted).
#[test]
fn a_criterion_failing_on_the_final_head_fails_the_verdict_with_steps_that_type() {
    let plan = "# X\n\n## API v1\n### Sprint 1: A\n- [ ] `a.txt` exists\n### Sprint 2: B\n- [ ] `b.txt` exists\n## docs\n### Sprint 1: Guide\n- [ ] `guide.md` exists\n";
    let mut sim = Sim::start(plan, EngineConfig::default());
    let early = sim.send(Input::HeadVerified {
        verification: HeadVerification::default(),
    });
    assert!(matches!(early, Err(Refusal::NotAllowed(_))), "{early:?}");
    sim.finish("API v1", success());
    sim.finish("docs", success());
    sim.finish("API v1", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert!(report::verification(sim.st()).passed());
    let check = |sprint: &str, text: &str, outcome, broken_by: Option<&str>| HeadCheck {
        unit: "API v1".into(),
        sprint: SprintId::parse(sprint).unwrap(),
        result: CriterionResult {
            line: 0,
            text: text.into(),
            outcome,
            detail: String::new(),
        },
        broken_by: broken_by.map(str::to_string),
    };
    let verification = HeadVerification {
        branch: "supervise/op1/integration".into(),
        head: "89abcdef01234567".into(),
        checks: vec![
            check(
                "1",
                "a.txt exists",
                CriterionOutcome::Failed,
                Some("API v1 Sprint 2's merge: 89abcde (\"tidy\")"),
            ),
            check("2", "b.txt exists", CriterionOutcome::Passed, None),
        ],
    };
    let d = sim
        .send(Input::HeadVerified {
            verification: verification.clone(),
        })
        .unwrap();
    let notice = notices(&sim, NoticeKind::VerificationFailed).join("\n");
    assert!(
        notice.contains("API v1 Sprint 1: `a.txt exists` passed when its sprint completed"),
        "{notice}"
    );
    assert!(
        notice.contains("broken by API v1 Sprint 2's merge"),
        "{notice}"
    );
    assert!(
        notice.contains("`git checkout supervise/op1/integration`")
            && notice.contains("`supervise verify --unit 'API v1' --sprint 1`"),
        "{notice}"
    );
    assert!(!report::verification(sim.st()).passed());
    assert!(d.effects.contains(&Effect::PublishStatus));
    // The same verification again changes nothing.
    let again = sim.send(Input::HeadVerified { verification }).unwrap();
    assert!(again.events.is_empty());
}

/// What Claude Code prints when the provider is overloaded.
fn overloaded() -> AgentReport {
    AgentReport {
        exit_code: Some(1),
        output_tail: r#"{"type":"result","subtype":"success","is_error":true,"num_turns":1,"result":"API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}","api_error_status":529}"#.into(),
        turns_used: None,
        usage: None,
        evidence: Evidence::default(),
    }
}

/// A storm of 529s on one sprint: each run it ends is waited out and sent
/// again on the same model, no attempt counted, one notice for the wait;
/// the sprint completes after the storm on its first attempt's model.
#[test]
fn the_providers_bad_minute_is_waited_out_not_escalated() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let first = sim.order_for("docs");
    for n in 0..4 {
        sim.finish("docs", overloaded());
        let sp = &sim.unit("docs").sprints[0];
        assert_eq!(sp.failures, 0, "storm run {n}: no attempt counted");
        assert!(
            sim.out().iter().all(|o| o.unit != "docs"),
            "not sent again before the wait is over"
        );
        sim.advance(15 * 60);
        sim.send(Input::Tick).unwrap();
        let again = sim.order_for("docs");
        assert_eq!(
            (again.tier, again.attempt),
            (first.tier, 1),
            "the same model, the same attempt"
        );
    }
    assert_eq!(
        notices(&sim, NoticeKind::Held)
            .iter()
            .filter(|t| t.contains("Waiting on the model provider"))
            .count(),
        1,
        "people are told once"
    );
    sim.finish("docs", success());
    assert_eq!(
        sim.unit("docs").sprints[0].status(),
        SprintStatus::Completed
    );
}

/// An agent that says the provider failed, for ever, is bounded: after
/// PROVIDER_RETRIES uncounted runs the next counts as a failed attempt.
#[test]
fn a_provider_error_said_for_ever_counts_in_the_end() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    for _ in 0..=supervise::engine::provider::PROVIDER_RETRIES {
        sim.finish("docs", overloaded());
        sim.advance(15 * 60);
        sim.send(Input::Tick).unwrap();
    }
    let sp = &sim.unit("docs").sprints[0];
    assert_eq!(sp.failures, 1, "{:?}", sp.last_failure);
    assert!(
        sp.last_failure
            .as_deref()
            .is_some_and(|f| f.contains("the model provider ended 7 runs in a row")),
        "{:?}",
        sp.last_failure
    );
}

/// A CLI that stopped at its turn limit left unfinished work: a
/// continuation, not a failed attempt.
#[test]
fn a_stop_at_the_turn_limit_is_continued_not_failed() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.finish(
        "docs",
        AgentReport {
            exit_code: Some(1),
            output_tail:
                r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":50}"#
                    .into(),
            turns_used: None,
            usage: None,
            evidence: Evidence::default(),
        },
    );
    let sp = &sim.unit("docs").sprints[0];
    assert_eq!((sp.failures, sp.continuations), (0, 1));
    let next = sim.order_for("docs");
    assert_eq!(next.kind, DispatchKind::Continuation);
    assert!(next.prompt.contains("turn limit"), "{}", next.prompt);
}

/// A sprint that is only ever partly done: each attempt gets its own
/// continuations (a new attempt is not "still partial after 3" at once),
/// and what it spends before it is BLOCKED stays inside the dry run's most.
#[test]
fn an_always_partial_sprint_spends_within_the_estimates_most() {
    let config = EngineConfig::default();
    let mut sim = Sim::start(THREE_UNITS, config.clone());
    let estimate = supervise::engine::estimate::estimate(&sim.st().plan, &config);
    let most: u64 = estimate
        .sprints
        .iter()
        .filter(|s| s.unit == "api" && s.sprint == "1")
        .map(|s| s.most)
        .sum();
    let mut dispatches = 0;
    while sim.unit("api").status != UnitStatus::Blocked {
        let s = &sim.unit("api").sprints[0];
        let (failures, continuations) = (s.failures, s.continuations);
        sim.finish("api", partial());
        dispatches += 1;
        let s = &sim.unit("api").sprints[0];
        if s.failures > failures {
            assert_eq!(
                continuations, config.max_continuations,
                "an attempt fails only after all its continuations ({dispatches} dispatches)"
            );
        }
        assert!(dispatches < 100, "the sprint ends");
    }
    let attempts = config.max_retries as usize;
    assert_eq!(
        dispatches,
        attempts * (1 + config.max_continuations as usize),
        "every attempt was continued"
    );
    let spent: u64 = ModelTier::ALL
        .iter()
        .map(|t| sim.st().charged_at(*t).1)
        .sum();
    assert!(spent <= most, "spent {spent}×, the estimate's most {most}×");
}

/// A continuation goes on with the model of the attempt it continues: the
/// failure before that attempt was answered when it began, not again.
#[test]
fn a_continuation_after_a_retry_does_not_escalate_again() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let first = sim.order_for("docs");
    sim.finish("docs", failure());
    let retry = sim.order_for("docs");
    assert_eq!(retry.kind, DispatchKind::Retry);
    assert!(retry.tier > first.tier, "a retry goes one tier up");
    sim.finish("docs", partial());
    let next = sim.order_for("docs");
    assert_eq!(next.kind, DispatchKind::Continuation);
    let why = sim
        .st()
        .decisions
        .iter()
        .rev()
        .find(|d| d.decision.starts_with("Model:"))
        .map(|d| d.rationale.clone())
        .unwrap_or_default();
    assert_eq!(next.tier, retry.tier.max(ModelTier::Sonnet), "{why}");
    assert!(!why.contains("one tier up"), "{why}");
}

/// Round five, item 2: `bad`'s merge breaks the build, and it ends BLOCKED
/// with that merge still on the integration branch. The next gate, for
/// `good` alone, fails where the place cannot tell which merge did it (CI
/// on GitHub ran on pull requests only): its output names `bad/BROKEN`, or
/// nothing at all. Neither charges `good` an attempt: the failure stays
/// bad's, and good waits BLOCKED with a notice that names bad.
#[test]
fn a_gate_failure_after_a_unit_is_blocked_with_its_merge_stays_that_units() {
    let plan = "# Pair\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| bad | bad | 0 |\n| good | good | 0 |\n\n\
## bad\n### Sprint 1: B\n- [ ] `bad/x.txt` exists\n\
## good\n### Sprint 1: G\n- [ ] `good/x.txt` exists\n";
    for output in [
        "error: bad/BROKEN: no such thing",
        "make: *** [all] Error 2",
    ] {
        let cfg = EngineConfig {
            build_gate: true,
            ..Default::default()
        };
        let mut sim = Sim::start(plan, cfg);
        sim.finish("good", success());
        // bad's every attempt lands, and the gate bisects the break to it.
        while sim.unit("bad").status == UnitStatus::Running {
            if sim.out().iter().any(|o| o.unit == "bad") {
                sim.finish("bad", success());
            }
            let (gate, units) = open_gate(&sim);
            if units.contains(&"bad".to_string()) {
                sim.send(Input::GateResult {
                    gate,
                    passed: false,
                    output: "error: bad/BROKEN".into(),
                    blame: GateBlame::Merge {
                        unit: "bad".into(),
                        sprint: SprintId::parse("1").unwrap(),
                    },
                })
                .unwrap();
            }
        }
        assert_eq!(sim.unit("bad").status, UnitStatus::Blocked);
        // Gates for good alone, until it is charged or waits.
        for _ in 0..4 {
            let (gate, units) = open_gate(&sim);
            if units != ["good"]
                || sim
                    .st()
                    .gates
                    .iter()
                    .all(|g| g.id != gate || g.passed.is_some())
            {
                break;
            }
            sim.send(Input::GateResult {
                gate,
                passed: false,
                output: output.into(),
                blame: GateBlame::Unknown,
            })
            .unwrap();
        }
        assert_eq!(
            sim.unit("good").sprints[0].failures,
            0,
            "{output}: good is charged for bad's merge"
        );
        assert!(
            sim.out().iter().all(|o| o.unit != "good"),
            "{output}: good re-run"
        );
        assert_eq!(sim.unit("good").status, UnitStatus::Blocked, "{output}");
        let told = notices(&sim, NoticeKind::Blocked);
        let good = told
            .iter()
            .find(|t| t.starts_with("BLOCKED: good"))
            .unwrap_or_else(|| panic!("{output}: good's notice in {told:?}"));
        assert!(good.contains("supervise resume bad"), "{good}");
        // bad's own notice quotes the build's output, not only its first line.
        let bad = told
            .iter()
            .find(|t| t.starts_with("BLOCKED: bad"))
            .expect("bad's notice");
        assert!(bad.contains("    error: bad/BROKEN"), "{bad}");
    }
}
