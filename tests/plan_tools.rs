//! The plan tools of §16–§18 on plans written for them: the seed's thresholds
//! and formulas as table tests, the order prioritize recommends as a property,
//! and `supervise plan analyze` as a process.

use proptest::prelude::*;
use supervise::plan::tools::{analyze, evaluate, measure, prioritize};
use supervise::plan::{self, Plan};

fn read(src: &str) -> Plan {
    plan::parse(src, "test").expect("the test plan reads")
}

const SHOP: &str = "# Shop\n\n| Work Unit | Dependencies |\n|---|---|\n| core | none |\n| api | core |\n| web | api |\n\n\
## core\n### Sprint 1: Define the core types\n- Create `src/types.rs` with the order model\n- [ ] `cargo build` passes\n- [ ] `src/types.rs` exists\n\
### Sprint 2: Storage\n- Write `src/store.rs`\n- [ ] `cargo test store` passes\n- [ ] `src/store.rs` exists\n\
## api\n### Sprint 1: HTTP handlers\n- Add `src/api.rs` calling the external payment API\n\n**Exit criteria**:\n- [ ] It works correctly\n\
## web\n### Sprint 1: Pages\n- Create `web/index.html`\n- Decide the CSS framework (TBD)\n- [ ] `web/index.html` exists\n";

#[test]
fn evaluate_flags_vague_and_manual_only_criteria_and_sizes_by_the_turn_formula() {
    let p = read(SHOP);
    let ev = evaluate::evaluate(&p, 50);
    let api = ev.sprints.iter().find(|c| c.unit == "api").unwrap();
    assert!(
        !api.no_vague_language,
        "\"works correctly\" is on §17d's list"
    );
    assert!(!api.machine_verifiable);
    assert!(api.advice.iter().any(|f| f.contains("machine check")));
    let core1 = &ev.sprints[0];
    assert!(core1.atomic() && core1.testable(), "{core1:?}");
    // §17e thresholds: > 80% of the budget is oversized, < 15% undersized.
    assert_eq!(
        core1.estimated_turns,
        measure::estimated_turns(&p, &p.work_units[0].sprints[0])
    );
    let tight = evaluate::evaluate(&p, core1.estimated_turns * 100 / 81);
    assert_eq!(tight.sprints[0].fitness, evaluate::Fitness::Oversized);
    let roomy = evaluate::evaluate(&p, core1.estimated_turns * 100 / 14);
    assert_eq!(roomy.sprints[0].fitness, evaluate::Fitness::Undersized);
    assert_eq!(
        evaluate::evaluate(&p, core1.estimated_turns * 2).sprints[0].fitness,
        evaluate::Fitness::RightSized
    );
}

#[test]
fn priority_is_the_seeds_composite_of_the_four_scores() {
    let p = read(SHOP);
    let ps = prioritize::prioritize(&p);
    let core1 = &ps[0];
    // Blocks core Sprint 2, api's sprint and web's sprint.
    assert_eq!(core1.dependency_depth, 3);
    assert_eq!(core1.foundation, 1, "\"types\" and two or more dependents");
    let expected = core1.dependency_depth as f64 * 3.0
        + core1.foundation as f64 * 2.0
        + core1.risk as f64
        + core1.complexity * 0.5;
    assert!((core1.priority - expected).abs() < 0.06, "{core1:?}");
    let api = ps.iter().find(|x| x.unit == "api").unwrap();
    assert_eq!(api.risk, 3, "an external API is the highest risk");
    let web = ps.iter().find(|x| x.unit == "web").unwrap();
    assert!(web.justification.contains("leaf sprint"));
}

#[test]
fn analyze_reports_open_questions_as_critical_and_finds_the_critical_path() {
    let p = read(SHOP);
    let a = analyze::analyze(&p, SHOP, 50);
    assert!(a.critical() > 0);
    assert!(a
        .open_questions
        .iter()
        .any(|(at, _, q)| at == "web Sprint 1" && q.contains("TBD")));
    assert_eq!(a.critical_path.0, ["core", "api", "web"]);
    assert_eq!(a.critical_path.1, 4);
    let report = analyze::report(&a, "EXECUTION_PLAN.md", "now");
    for part in [
        "## Pass 1: Completeness Analysis",
        "## Pass 2: Atomicity & Testability Analysis",
        "## Pass 3: Priority & Parallelism Analysis",
        "**Critical Path**: core → api → web (length: 4 sprints)",
        "| api 1 | ✗ | ✗ | ✗ | FAIL |",
    ] {
        assert!(report.contains(part), "missing {part}:\n{report}");
    }
}

#[test]
fn the_cli_writes_the_report_beside_the_plan_and_leaves_the_plan_alone() {
    let dir = tempfile::tempdir().unwrap();
    let plan_path = dir.path().join("EXECUTION_PLAN.md");
    std::fs::write(&plan_path, SHOP).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args(["plan", "analyze"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "critical issues: exit 2");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("## Analysis Complete"), "{stdout}");
    assert!(stdout.contains("Expected cost: "), "{stdout}");
    let report = std::fs::read_to_string(dir.path().join("ANALYSIS_REPORT.md")).unwrap();
    assert!(report.starts_with("# Execution Plan Analysis Report"));
    assert_eq!(std::fs::read_to_string(&plan_path).unwrap(), SHOP);
    // --dry-run prints and writes nothing.
    std::fs::remove_file(dir.path().join("ANALYSIS_REPORT.md")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args(["plan", "analyze", "--dry-run", "--max-turns", "80"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Context budget: 80 turns"), "{stdout}");
    assert!(stdout.contains("Expected cost: "), "{stdout}");
    assert!(!dir.path().join("ANALYSIS_REPORT.md").exists());
}

/// Random plans: layers and dependencies on earlier units.
fn random_plan() -> impl Strategy<Value = String> {
    (2usize..8)
        .prop_flat_map(|n| {
            (
                prop::collection::vec(1usize..4, n),
                prop::collection::vec(any::<u8>(), n),
                prop::collection::vec(0u32..3, n),
            )
        })
        .prop_map(|(sprints, deps, words)| {
            let mut src = String::from("# R\n\n| Work Unit | Dependencies |\n|---|---|\n");
            for (i, mask) in deps.iter().enumerate() {
                let d: Vec<String> = (0..i)
                    .filter(|j| mask & (1 << j) != 0)
                    .map(|j| format!("u{j}"))
                    .collect();
                let d = if d.is_empty() { "none".into() } else { d.join(", ") };
                src.push_str(&format!("| u{i} | {d} |\n"));
            }
            for (i, count) in sprints.iter().enumerate() {
                src.push_str(&format!("\n## u{i}\n"));
                let word = ["core types", "external api client", "docs"][words[i] as usize];
                for s in 1..=*count {
                    src.push_str(&format!(
                        "### Sprint {s}: Step {s} {word}\n- Write `src/u{i}_{s}.rs`\n- [ ] `make u{i}-{s}` passes\n"
                    ));
                }
            }
            src
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// §16d: the recommended order never runs a sprint before the sprint
    /// before it in its unit, before a unit it depends on is done, or before
    /// a lower layer is done; and it places every sprint once.
    #[test]
    fn the_recommended_order_keeps_every_hard_constraint(src in random_plan()) {
        let p = read(&src);
        let ps = prioritize::prioritize(&p);
        let mut places: Vec<usize> = ps.iter().map(|x| x.recommended).collect();
        places.sort_unstable();
        prop_assert_eq!(places, (1..=ps.len()).collect::<Vec<_>>());
        let at = |unit: &str, i: usize| {
            let id = &p.unit(unit).unwrap().sprints[i].id;
            ps.iter().find(|x| x.unit == unit && &x.sprint == id).unwrap().recommended
        };
        for u in &p.work_units {
            for i in 1..u.sprints.len() {
                prop_assert!(at(&u.name, i - 1) < at(&u.name, i));
            }
            let first = at(&u.name, 0);
            for d in &u.depends_on {
                let dep = p.unit(d).unwrap();
                prop_assert!(at(d, dep.sprints.len() - 1) < first, "{} before its dependency {}", u.name, d);
            }
            for v in p.work_units.iter().filter(|v| v.layer < u.layer) {
                prop_assert!(at(&v.name, v.sprints.len() - 1) < first);
            }
        }
    }
}

// ---- breakdown (§15) ---------------------------------------------------------------

mod breakdown_of_documents {
    use supervise::plan::tools::breakdown::{breakdown, Signal};

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/requirements")
                .join(name),
        )
        .unwrap()
    }

    /// What every generated plan must be: read back by the reader to the same
    /// units and sprints with the same tasks, sprints of 3 to 7 tasks (a
    /// unit's chores excepted, which are one sprint), and no task lost on
    /// the way.
    fn check(name: &str) -> supervise::plan::tools::breakdown::Breakdown {
        let b = breakdown(&fixture(name), "project");
        let plan = supervise::plan::parse(&b.plan, "EXECUTION_PLAN.md")
            .unwrap_or_else(|p| panic!("{name}: the reader refuses the plan: {p:?}\n{}", b.plan));
        assert_eq!(plan.work_units.len(), b.units.len(), "{name}");
        for (u, d) in plan.work_units.iter().zip(&b.units) {
            assert_eq!(u.name, d.name);
            assert_eq!(u.sprints.len(), d.sprints.len(), "{name}: {}", u.name);
            for (s, ds) in u.sprints.iter().zip(&d.sprints) {
                assert_eq!(s.tasks, ds.tasks, "{name}: tasks read back");
                // A unit's chores (docs, tests, configuration) are one
                // sprint, however few they are.
                let chores = ds
                    .tasks
                    .iter()
                    .all(|t| supervise::plan::tools::breakdown::is_chore(t));
                assert!(
                    ds.tasks.len() <= 7 && (ds.tasks.len() >= 3 || chores),
                    "{name}: {} has {} tasks (3 to 7, §15e): {:?}",
                    ds.name,
                    ds.tasks.len(),
                    ds.tasks
                );
                assert!(!s.exit_criteria.is_empty());
            }
        }
        let planned: usize = b
            .units
            .iter()
            .flat_map(|u| &u.sprints)
            .map(|s| s.tasks.len())
            .sum();
        assert_eq!(planned, b.tasks.len(), "{name}: every task is in a sprint");
        // A change and its tests stay together: a requirement of at most
        // seven tasks is in one sprint.
        let sprints: Vec<&Vec<String>> = b
            .units
            .iter()
            .flat_map(|u| &u.sprints)
            .map(|s| &s.tasks)
            .collect();
        for r in 0..b.requirements.len() {
            let tasks: Vec<&String> = b
                .tasks
                .iter()
                .filter(|t| t.requirement == r)
                .map(|t| &t.text)
                .collect();
            let holding = sprints
                .iter()
                .filter(|s| tasks.iter().any(|t| s.contains(t)))
                .count();
            assert!(
                tasks.len() > 7 || holding <= 1,
                "{name}: requirement {} is spread over {holding} sprints",
                b.requirements[r].text
            );
        }
        insta::assert_snapshot!(format!("breakdown_{name}"), b.plan);
        // Held to what any plan made from a document is held to: every
        // requirement in some sprint, a machine check in every sprint, none
        // over the budget.
        if let Err(problems) =
            supervise::plan::tools::breakdown::accept(&fixture(name), &b.plan, 50)
        {
            panic!("{name}: {}\n{}", problems.join("\n"), b.plan);
        }
        b
    }

    fn machine_checkable(plan: &str) -> usize {
        let p = supervise::plan::parse(plan, "EXECUTION_PLAN.md").unwrap();
        p.work_units
            .iter()
            .flat_map(|u| &u.sprints)
            .filter(|s| s.exit_criteria.iter().any(|c| c.command.is_some()))
            .count()
    }

    #[test]
    fn a_prd_with_rfc_keywords() {
        let b = check("prd.md");
        assert!(
            b.requirements
                .iter()
                .filter(|r| r.signal == Signal::Rfc)
                .count()
                >= 12
        );
        let names: Vec<&str> = b.units.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Accounts",
                "Transactions",
                "Reports",
                "Non-Functional Requirements"
            ]
        );
        assert_eq!(
            b.out_of_scope.len(),
            2,
            "multi-currency and the web front end"
        );
        assert_eq!(
            machine_checkable(&b.plan),
            b.units.iter().map(|u| u.sprints.len()).sum::<usize>(),
            "`cargo test` on every sprint"
        );
    }

    #[test]
    fn user_stories_with_acceptance_criteria() {
        let b = check("stories.md");
        assert_eq!(
            b.requirements
                .iter()
                .filter(|r| r.signal == Signal::UserStory)
                .count(),
            7
        );
        assert!(
            b.plan.contains("`npm test -- recipes` passes"),
            "{}",
            b.plan
        );
        assert!(b.plan.contains(
            "Given a shared link, when a stranger opens it, then the recipe is shown read-only"
        ));
    }

    #[test]
    fn a_bug_list() {
        let b = check("bugs.md");
        assert_eq!(b.requirements.len(), 6, "the fixed one is left out");
        assert!(b.plan.contains("`pytest` passes"));
        assert_eq!(b.out_of_scope.len(), 1);
    }

    #[test]
    fn a_readme_feature_list() {
        let b = check("readme.md");
        assert!(
            b.tasks
                .iter()
                .any(|t| t.text == "Add support for prefix scans"),
            "{:?}",
            b.tasks
        );
        assert!(b.plan.contains("`go test ./...` passes"));
        assert!(b.plan.contains("`store/log.go` exists"));
        assert_eq!(b.out_of_scope.len(), 1, "replication is v2");
    }

    #[test]
    fn an_issue_body() {
        let b = check("issue.md");
        assert_eq!(b.units.len(), 1);
        assert!(b.requirements.iter().any(|r| r.signal == Signal::Rfc));
        assert_eq!(b.out_of_scope.len(), 1);
    }
}

// ---- the rewrites of evaluate (§17g) and prioritize (§16g) -------------------------

mod rewrites {
    use proptest::prelude::*;
    use supervise::plan::tools::measure::is_vague;
    use supervise::plan::tools::rewrite::{evaluated, prioritized};
    use supervise::plan::{parse, Plan};

    /// Every plan of the reader's corpus that reads, with its name.
    fn corpus() -> Vec<(String, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plans");
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let text = std::fs::read_to_string(&p).unwrap();
            if parse(&text, "EXECUTION_PLAN.md").is_ok() {
                out.push((p.file_name().unwrap().to_string_lossy().to_string(), text));
            }
        }
        out.sort();
        assert!(out.len() >= 10, "the corpus is there");
        out
    }

    fn tasks(p: &Plan) -> Vec<String> {
        let mut t: Vec<String> = p
            .work_units
            .iter()
            .flat_map(|u| u.sprints.iter().flat_map(|s| s.tasks.clone()))
            .collect();
        t.sort();
        t
    }

    fn criteria(p: &Plan) -> Vec<String> {
        p.work_units
            .iter()
            .flat_map(|u| {
                u.sprints
                    .iter()
                    .flat_map(|s| s.exit_criteria.iter().map(|c| c.text.clone()))
            })
            .collect()
    }

    /// The lines a rewrite does not own: outside every sprint section, and
    /// not a Work Units table row.
    fn unowned(p: &Plan, text: &str) -> Vec<String> {
        let lines: Vec<&str> = text.lines().collect();
        let first_sprint = p
            .work_units
            .iter()
            .flat_map(|u| u.sprints.iter().map(|s| s.line))
            .min()
            .unwrap_or(lines.len() + 1);
        lines[..first_sprint.saturating_sub(1).min(lines.len())]
            .iter()
            .filter(|l| !l.trim_start().starts_with('|'))
            .map(|l| l.to_string())
            .collect()
    }

    /// What evaluate's rewrite must keep, for any plan and budget.
    fn evaluate_keeps(name: &str, src: &str, budget: u32) {
        let before = parse(src, "EXECUTION_PLAN.md").unwrap();
        let rw = evaluated(&before, src, budget);
        let after = parse(&rw.text, "EXECUTION_PLAN.md").unwrap_or_else(|p| {
            panic!("{name} @ {budget}: does not read back: {p:?}\n{}", rw.text)
        });
        assert_eq!(
            tasks(&after),
            tasks(&before),
            "{name} @ {budget}: a task lost or made up"
        );
        let kept = criteria(&after).join("\n");
        for c in criteria(&before) {
            if !is_vague(&c) {
                assert!(
                    kept.contains(&c),
                    "{name} @ {budget}: criterion lost: {c}\n{}",
                    rw.text
                );
            }
        }
        assert_eq!(
            unowned(&after, &rw.text),
            unowned(&before, src),
            "{name} @ {budget}: prose changed"
        );
        let bare = |p: &Plan| {
            p.work_units
                .iter()
                .flat_map(|u| &u.sprints)
                .filter(|s| s.exit_criteria.is_empty())
                .count()
        };
        assert!(
            bare(&after) <= bare(&before),
            "{name} @ {budget}: a sprint lost all its exit criteria"
        );
        for (u, v) in before.work_units.iter().zip(&after.work_units) {
            assert_eq!(u.name, v.name);
            assert_eq!(
                u.depends_on, v.depends_on,
                "{name}: dependencies are not the rewrite's"
            );
        }
        let sprints: usize = after.work_units.iter().map(|u| u.sprints.len()).sum();
        assert_eq!(sprints, rw.sprints_after, "{name} @ {budget}");
        assert!(
            rw.sprints_after + rw.merges >= rw.sprints_before + rw.splits,
            "{name} @ {budget}: each split adds a sprint"
        );
    }

    #[test]
    fn evaluate_rewrites_the_corpus_without_losing_anything() {
        for (name, src) in corpus() {
            for budget in [15, 30, 50, 120, 400] {
                evaluate_keeps(&name, &src, budget);
            }
        }
    }

    #[test]
    fn prioritize_rewrites_the_corpus_within_its_constraints() {
        for (name, src) in corpus() {
            let before = parse(&src, "EXECUTION_PLAN.md").unwrap();
            let rw = prioritized(&before, &src);
            let after =
                parse(&rw.text, "EXECUTION_PLAN.md").unwrap_or_else(|p| panic!("{name}: {p:?}"));
            assert_eq!(tasks(&after), tasks(&before), "{name}");
            for (u, v) in before.work_units.iter().zip(&after.work_units) {
                assert_eq!(u.name, v.name, "{name}: units keep their order");
                let ids = |x: &supervise::plan::WorkUnit| {
                    x.sprints.iter().map(|s| s.id.clone()).collect::<Vec<_>>()
                };
                assert_eq!(
                    ids(u),
                    ids(v),
                    "{name}: sprints keep their order and numbers"
                );
                assert_eq!(u.depends_on, v.depends_on, "{name}: dependencies kept");
                for d in &v.depends_on {
                    let dep = after.unit(d).unwrap();
                    assert!(
                        dep.layer < v.layer || v.layer == u.layer,
                        "{name}: {} no longer after {d}",
                        v.name
                    );
                }
                assert!(v.layer <= u.layer, "{name}: a layer only moves earlier");
            }
            // Again: the annotations are replaced, not repeated.
            let again = prioritized(&after, &rw.text);
            assert_eq!(again.text, rw.text, "{name}: prioritize is idempotent");
        }
    }

    #[test]
    fn a_sprint_across_unrelated_places_is_split_by_concern() {
        let src = "# Shop\n\n## Sprint 1: Everything\n\n**Tasks**:\n1. Create `api/orders.rs`\n2. Create `web/orders.html`\n3. Wire `web/orders.js` to the API\n4. Add `ops/alerts.yaml`\n\nSome prose to keep.\n\n**Exit criteria**:\n- [ ] `make check` passes\n\n## Sprint 2: Docs\n\n**Entry criteria**:\n- [ ] Sprint 1 exit criteria met\n\n**Tasks**:\n1. Write `docs/orders.md`\n2. Write `docs/alerts.md`\n3. Write `docs/web.md`\n\n**Exit criteria**:\n- [ ] `docs/orders.md` exists\n";
        let before = parse(src, "EXECUTION_PLAN.md").unwrap();
        let rw = evaluated(&before, src, 50);
        let after = parse(&rw.text, "EXECUTION_PLAN.md").unwrap();
        let names: Vec<String> = after.work_units[0]
            .sprints
            .iter()
            .map(|s| format!("{} {}", s.id, s.name))
            .collect();
        assert_eq!(
            names,
            [
                "1 Everything",
                "2 Everything — web/",
                "3 Everything — ops/",
                "4 Docs"
            ],
            "{}",
            rw.text
        );
        let s = &after.work_units[0].sprints;
        assert_eq!(
            s[1].tasks,
            [
                "Create `web/orders.html`",
                "Wire `web/orders.js` to the API"
            ]
        );
        assert_eq!(
            s[2].exit_criteria[0].command.as_deref(),
            Some("make check"),
            "the last part ends with the original check"
        );
        assert_eq!(
            s[3].entry_criteria[0].text, "Sprint 3 exit criteria met",
            "re-pointed at the sprint ending with it"
        );
        assert!(rw.text.contains("Some prose to keep."));
    }

    fn generated_plan() -> impl Strategy<Value = String> {
        // Units of sprints with 1–12 tasks naming files, some criteria vague.
        let sprint = (1usize..12, any::<bool>(), any::<bool>(), any::<bool>());
        let unit = prop::collection::vec(sprint, 1..5);
        prop::collection::vec(unit, 1..4).prop_map(|units| {
            let mut s = String::from("# Gen\n\nProse that no tool owns.\n\n| Work Unit | Directory | Sprints |\n|---|---|---|\n");
            for (u, sprints) in units.iter().enumerate() {
                s.push_str(&format!("| u{u} | u{u} | {} |\n", sprints.len()));
            }
            for (u, sprints) in units.iter().enumerate() {
                s.push_str(&format!("\n## u{u}\n"));
                for (i, (n, vague, numbered, spread)) in sprints.iter().enumerate() {
                    s.push_str(&format!("\n### Sprint {}: Step {i} of u{u}\n\n", i + 1));
                    if i > 0 {
                        s.push_str(&format!("**Entry criteria**:\n- [ ] Sprint {i} exit criteria met\n\n"));
                    }
                    s.push_str("A note with a [link](https://example.com).\n\n**Tasks**:\n");
                    for t in 0..*n {
                        let marker = if *numbered { format!("{}.", t + 1) } else { "-".into() };
                        // Spread: the tasks touch three unrelated places.
                        let place = if *spread { ["api", "web", "ops"][t % 3].to_string() } else { format!("u{u}") };
                        s.push_str(&format!("{marker} Create `{place}/s{i}/f{t}.rs` with part {t}\n"));
                    }
                    s.push_str("\n**Exit criteria**:\n");
                    if *vague {
                        s.push_str("- [ ] it works correctly\n");
                    } else {
                        let place = if *spread { "api".to_string() } else { format!("u{u}") };
                        s.push_str(&format!("- [ ] `{place}/s{i}/f0.rs` exists\n"));
                    }
                }
            }
            s
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(120))]
        #[test]
        fn evaluate_never_loses_a_task_or_a_criterion(src in generated_plan(), budget in 10u32..200) {
            evaluate_keeps("generated", &src, budget);
        }

        /// analyze agrees with itself: every FAIL row of its tables is a
        /// finding of pass 2 at that sprint, a pass says PASS only without
        /// critical or recommended findings, and the totals are the findings.
        #[test]
        fn analyze_summary_is_computed_from_the_findings_its_tables_show(src in generated_plan(), budget in 10u32..200) {
            let p = parse(&src, "EXECUTION_PLAN.md").unwrap();
            let a = supervise::plan::tools::analyze::analyze(&p, &src, budget);
            for c in &a.evaluation.sprints {
                if !(c.atomic() && c.testable()) {
                    let at = format!("{} Sprint {}", c.unit, c.sprint);
                    prop_assert!(
                        a.findings.iter().any(|f| f.pass == 2 && f.location == at),
                        "{at} fails a check but has no finding"
                    );
                }
            }
            let summary = supervise::plan::tools::analyze::summary(&a);
            for (pass, name) in [(1u8, "Completeness"), (2, "Atomicity & Testability"), (3, "Priority & Parallelism")] {
                let blocking = a.count(pass, supervise::plan::tools::analyze::Severity::Critical) + a.count(pass, supervise::plan::tools::analyze::Severity::Recommended);
                let row = summary.lines().find(|l| l.starts_with(&format!("| {name} |"))).unwrap();
                prop_assert_eq!(row.contains("| PASS |"), blocking == 0, "{}", row);
            }
            let total = format!("**Total Issues**: {} ", a.findings.len());
            prop_assert!(summary.contains(&total), "{}", summary);
        }
    }
}

/// Three units; `docs` is in layer 1 though it declares no dependency.
const SCOPED: &str = "# Tools\n\n| Work Unit | Directory | Layer | Dependencies |\n|---|---|---|---|\n| core | core | 0 | none |\n| api | api | 1 | core |\n| docs | docs | 1 | none |\n\n\
## core\n### Sprint 1: Core types\n- Create `core/src/lib.rs`\n\n**Exit criteria**:\n- [ ] `cargo test -p core` passes\n\n\
## api\n### Sprint 1: Handlers\n- Create `api/src/handlers.rs`\n\n**Exit criteria**:\n- [ ] It works correctly\n\n\
## docs\n### Sprint 1: Guide\n- Write `docs/guide.md`\n\n**Exit criteria**:\n- [ ] `docs/guide.md` exists\n";

#[test]
fn evaluate_never_hands_a_unit_another_units_command_and_a_second_run_finds_nothing() {
    use supervise::plan::tools::rewrite::evaluated;
    let once = evaluated(&read(SCOPED), SCOPED, 50);
    let api = once
        .text
        .split("## api")
        .nth(1)
        .unwrap()
        .split("## docs")
        .next()
        .unwrap();
    assert!(
        !api.contains("-p core"),
        "core's command given to api:\n{api}"
    );
    assert!(api.contains("`cargo test` passes"), "{api}");
    assert!(once.criteria_fixed > 0, "{:?}", once.changes);
    let twice = evaluated(&read(&once.text), &once.text, 50);
    assert_eq!(twice.text, once.text, "{:?}", twice.changes);
    assert_eq!(
        (twice.criteria_fixed, twice.splits, twice.merges),
        (0, 0, 0)
    );
}

#[test]
fn prioritize_moves_a_unit_to_the_earliest_layer_its_declared_dependencies_allow() {
    use supervise::plan::tools::rewrite::prioritized;
    let rw = prioritized(&read(SCOPED), SCOPED);
    assert!(
        rw.text.contains("| docs | docs | 0 | none |"),
        "{}",
        rw.text
    );
    assert!(
        rw.text.contains("| api | api | 1 | core |"),
        "api needs core"
    );
    assert_eq!(
        rw.layer_changes,
        vec!["docs: layer 1 → 0 (its dependencies allow it)"]
    );
    let again = prioritized(&read(&rw.text), &rw.text);
    assert!(again.layer_changes.is_empty(), "{:?}", again.layer_changes);
}

/// A sprint of four tasks checked by one command fails "full coverage":
/// analyze's tables say FAIL, so its summary must not say PASS.
#[test]
fn analyze_never_says_pass_beside_a_fail_in_its_tables() {
    let src = "# One\n\n## Sprint 1: Build the service\n- Implement the parser\n- Implement the checker\n- Implement the printer\n- Implement the runner\n\n**Exit criteria**:\n- [ ] `make test` passes\n";
    let a = analyze::analyze(&read(src), src, 50);
    let c = &a.evaluation.sprints[0];
    assert!(!c.testable(), "{c:?}");
    let summary = analyze::summary(&a);
    assert!(
        summary.contains("| Atomicity & Testability | NEEDS_WORK |"),
        "{summary}"
    );
    assert!(a.findings.iter().any(|f| f.pass == 2), "{:?}", a.findings);
}

/// §15 on a small PRD: a list's shared noun stays with every item, the
/// tests cover the whole requirement, and `bm search` never shares a sprint
/// with the exports.
#[test]
fn breakdown_keeps_each_concern_in_its_own_sprint_and_loses_no_word() {
    use supervise::plan::tools::breakdown::breakdown;
    let doc = "# Bookmarks CLI\n\n## Features\n- Add support for JSON, CSV and HTML export\n- Implement `bm search` to find bookmarks by tag\n- Add tests for the JSON export\n";
    let b = breakdown(doc, "bm");
    let tasks: Vec<&String> = b
        .units
        .iter()
        .flat_map(|u| &u.sprints)
        .flat_map(|s| &s.tasks)
        .collect();
    for format in ["JSON", "CSV", "HTML"] {
        assert!(
            tasks
                .iter()
                .any(|t| t.contains(&format!("{format} export"))),
            "{format} lost its noun: {tasks:?}"
        );
    }
    assert!(
        tasks
            .iter()
            .any(|t| t.starts_with("Write tests for") && t.contains("JSON, CSV and HTML export")),
        "{tasks:?}"
    );
    for s in b.units.iter().flat_map(|u| &u.sprints) {
        let search = s.tasks.iter().any(|t| t.contains("bm search"));
        let export = s.tasks.iter().any(|t| t.contains("export"));
        assert!(
            !(search && export),
            "mixed concerns in {}: {:?}",
            s.name,
            s.tasks
        );
    }
}

/// §15 on the rate-limiting PRD a user tried: four requirements of four
/// different changes become four sprints, one requirement each, named by
/// the whole gist of their requirement; the coverage table gives each its
/// own line; the one with a file to show has it as its exit criterion.
#[test]
fn breakdown_gives_each_requirement_its_own_sprint_and_whole_title() {
    use supervise::plan::tools::breakdown::breakdown;
    let doc = "# Rate limiting for the public API\n\n\
- The API MUST reject more than 100 requests per minute per API key with HTTP 429 responses.\n\
- Every response MUST carry an `X-RateLimit-Remaining` header with the requests left in the window.\n\
- Counters SHOULD live in Redis so that every replica shares them.\n\
- Limits MUST be configurable per plan in `config/limits.toml`.\n";
    let b = breakdown(doc, "api");
    let sprints: Vec<_> = b.units.iter().flat_map(|u| &u.sprints).collect();
    assert_eq!(sprints.len(), 4, "{}", b.plan);
    for (s, r) in sprints.iter().zip(&b.requirements) {
        let theirs: Vec<usize> = b
            .tasks
            .iter()
            .filter(|t| s.tasks.contains(&t.text))
            .map(|t| t.requirement)
            .collect();
        assert!(
            !theirs.is_empty() && theirs.iter().all(|&i| b.requirements[i].text == r.text),
            "{}: {:?}",
            s.name,
            s.tasks
        );
    }
    assert_eq!(
        sprints[0].name,
        "Reject more than 100 requests per minute per API key with HTTP 429 responses"
    );
    assert_eq!(
        b.requirements.iter().map(|r| r.line).collect::<Vec<_>>(),
        [3, 4, 5, 6]
    );
    assert!(
        sprints[3]
            .exit
            .contains(&"`config/limits.toml` exists".to_string()),
        "{:?}",
        sprints[3].exit
    );
    assert!(
        !sprints[2].exit.iter().any(|e| e.contains("limits.toml")),
        "{:?}",
        sprints[2].exit
    );
}

/// What any plan made from a document is held to: each failure named, so
/// whoever made the plan (an agent, a person) can be told what to fix.
#[test]
fn a_plan_from_a_document_is_accepted_only_when_it_covers_and_checks_everything() {
    use supervise::plan::tools::breakdown::accept;
    let doc = "# Bookmarks\n\nRun `cargo test` to check.\n\n## Features\n- Add support for JSON, CSV and HTML export\n- Implement `bm search` to find bookmarks by tag\n";
    let missing_and_vague = "# Bookmarks\n\n## Sprint 1: Exports\n- Add support for JSON export\n- Add support for CSV export\n- Add support for HTML export\n\n**Exit criteria**:\n- [ ] It works correctly\n";
    let problems = accept(doc, missing_and_vague, 50).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("is in no sprint") && p.contains("bm search")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("no exit criterion a machine can check")),
        "{problems:?}"
    );
    let good = "# Bookmarks\n\n## Sprint 1: Exports\n- Add support for JSON export\n- Add support for CSV export\n- Add support for HTML export\n\n**Exit criteria**:\n- [ ] `cargo test export` passes\n\n## Sprint 2: Search\n- Implement `bm search` to find bookmarks by tag\n\n**Exit criteria**:\n- [ ] `cargo test search` passes\n";
    let coverage = accept(doc, good, 50).unwrap_or_else(|p| panic!("{p:?}"));
    assert_eq!(coverage.len(), 2);
    assert!(
        coverage.iter().all(|c| !c.sprints.is_empty()),
        "{coverage:?}"
    );
    let oversized = accept(doc, good, 2).unwrap_err();
    assert!(
        oversized.iter().any(|p| p.contains("over the budget")),
        "{oversized:?}"
    );
    assert!(accept(doc, "no plan here", 50).is_err());
}

/// A sprint checked only by commands is dispatched even when its work is
/// there (a command that passes before the work is no evidence): analyze
/// says so, and a file criterion beside the command quiets it.
#[test]
fn analyze_warns_that_command_only_criteria_cannot_tell_done_from_not_done() {
    let commands = "# Greet\n\n## Sprint 1: Greeting\n- [ ] Write greet() in `src/greet.sh`\n\
                    **Exit criteria**:\n- [ ] `cargo test` passes\n";
    let a = analyze::analyze(&read(commands), commands, 50);
    let warned: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.problem.contains("cannot tell done from not done"))
        .collect();
    assert_eq!(warned.len(), 1, "{:#?}", a.findings);
    assert_eq!(warned[0].line, 3, "the sprint's heading");
    assert!(warned[0].recommendation.contains("exists"));
    let with_file = "# Greet\n\n## Sprint 1: Greeting\n- [ ] Write greet() in `src/greet.sh`\n\
                     **Exit criteria**:\n- [ ] `cargo test` passes\n- [ ] `src/greet.sh` contains \"greet()\"\n";
    let a = analyze::analyze(&read(with_file), with_file, 50);
    assert!(
        a.findings
            .iter()
            .all(|f| !f.problem.contains("cannot tell done from not done")),
        "{:#?}",
        a.findings
    );
}

/// analyze agrees with itself: a missed opportunity for parallelism is no
/// PASS, the maximum parallelism says what taking it gives, and an open
/// question is placed at its own line, not its sprint heading's.
#[test]
fn analyze_agrees_with_itself_on_parallelism_and_places_open_questions() {
    let src = "# Site\n\n| Work Unit | Layer | Dependencies |\n|---|---|---|\n| api | 0 | — |\n| web | 1 | api |\n| docs | 2 | — |\n\n## api\n### Sprint 1: Types\n- [ ] Write the types\n- [ ] `api/types.txt` exists\n\n## web\n### Sprint 1: Page\n- [ ] Build the page, TBD which framework\n- [ ] `web/index.html` exists\n\n## docs\n### Sprint 1: Guide\n- [ ] `docs/guide.md` exists\n";
    let a = analyze::analyze(&read(src), src, 50);
    let summary = analyze::summary(&a);
    assert!(
        summary.contains("| Priority & Parallelism | NEEDS_WORK |"),
        "{summary}"
    );
    let report = analyze::report(&a, "EXECUTION_PLAN.md", "now");
    assert!(report.contains("- docs: layer 2 → 0"), "{report}");
    assert!(
        report.contains("**Maximum Parallelism**: 2 agents at once once the missed opportunities above are taken (1 as the plan stands)"),
        "{report}"
    );
    assert_eq!(a.open_questions.len(), 1);
    assert_eq!(a.open_questions[0].1, 16, "the task's own line");
}

/// User stories become sprints a person reads as sentences — "Give a
/// harbour master the predicted level" (a thing asked for), "Let an admin
/// see…" (an action), never a role followed by a noun — one story each, of
/// 3 to 7 tasks, the two stories that share only the word "level" apart.
#[test]
fn stories_become_grammatical_sprints_of_one_story_and_three_tasks() {
    use supervise::plan::tools::breakdown::breakdown;
    let doc = "# Tide watch\n\n## Users\n\n\
- As a harbour master, I want the predicted water level for the next 12 hours, so that I can plan berths.\n\
- As an admin, I want to see every station's last reading.\n\
- As a skipper, I want to be able to get notified when the level drops below my keel depth.\n\n\
Run `npm test` to check the work.\n";
    let b = breakdown(doc, "tide");
    let sprints: Vec<_> = b.units.iter().flat_map(|u| &u.sprints).collect();
    let names: Vec<&str> = sprints.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Give a harbour master the predicted water level for the next 12 hours",
            "Let an admin see every station's last reading",
            "Let a skipper get notified when the level drops below their keel depth",
        ]
    );
    for s in &sprints {
        assert!(
            (3..=7).contains(&s.tasks.len()),
            "{}: {:?}",
            s.name,
            s.tasks
        );
    }
}

/// An open question is a word, not a part of one: a todo app's "todos"
/// asks nothing, a "TODO" or "TBD" does.
#[test]
fn open_questions_are_words_not_parts_of_words() {
    use supervise::plan::tools::analyze::analyze;
    let source = "# Todo app\n\n## Sprint 1: List the todos\n- Show every todos entry, in order\n- [ ] `src/todos.rs` exists\n\n\
## Sprint 2: Sync\n- Pick the sync protocol (TBD)\n- [ ] `src/sync.rs` exists\n";
    let plan = supervise::plan::parse(source, "EXECUTION_PLAN.md").unwrap();
    let a = analyze(&plan, source, 50);
    let asked: Vec<&str> = a
        .open_questions
        .iter()
        .map(|(_, _, t)| t.as_str())
        .collect();
    assert_eq!(asked, ["Pick the sync protocol (TBD)"], "{:#?}", a.findings);
}
