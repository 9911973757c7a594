//! The plan reader against the fixture corpus: a JSON snapshot of what
//! `supervise plan show --json` prints for every usable plan, the exact problem
//! lines for every malformed one, and random Markdown that must never panic.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use supervise::plan::{self, DependencyStructure, LoadError, SprintType};

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plans");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md") && !p.ends_with("PROGRESS.md"))
        .collect();
    files.sort();
    files
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/plans")
        .join(name)
}

#[test]
fn every_usable_plan_matches_its_snapshot() {
    let usable: Vec<_> = fixtures()
        .into_iter()
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with("bad_"))
        .collect();
    assert!(
        usable.len() >= 12,
        "the corpus should hold at least 12 usable plans"
    );
    for path in usable {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let loaded = plan::load(&path).unwrap_or_else(|e| panic!("{name} should be usable: {e}"));
        let json = serde_json::to_string_pretty(&loaded.plan).unwrap();
        insta::assert_snapshot!(name, json);
    }
}

fn problems(name: &str) -> Vec<(usize, String)> {
    match plan::load(&fixture(name)) {
        Err(LoadError::Plan(e)) => e
            .problems
            .into_iter()
            .map(|p| (p.line, p.message))
            .collect(),
        other => panic!("{name} should be refused, got {other:?}"),
    }
}

#[test]
fn malformed_plans_are_refused_with_their_lines() {
    assert_eq!(
        problems("bad_no_sprints.md"),
        [(1, "work unit `Ideas` has no sprints".to_string())]
    );
    assert_eq!(
        problems("bad_duplicate_sprint.md"),
        [(
            9,
            "work unit `Duplicates` defines sprint 2 twice".to_string()
        )]
    );
    assert_eq!(
        problems("bad_unknown_dependency.md"),
        [
            (
                6,
                "work unit `ui` depends on `engien`, which the plan does not define".to_string()
            ),
            (
                7,
                "work unit `cli` depends on `storage`, which the plan does not define".to_string()
            ),
        ]
    );
    assert_eq!(
        problems("bad_cycle.md"),
        [(5, "dependency cycle: a → c → b → a".to_string())]
    );
    assert_eq!(
        problems("bad_unit_without_sprints.md"),
        [(6, "work unit `ui` has no sprints".to_string())]
    );
    // `## transform` holds `### Normalise names` and a checklist, which the
    // reader does not take for a sprint: read anyway, the plan would lose the
    // unit and both edges through it, and `report` would start at once.
    // (A checklist there is a sprint: `16_graph_with_a_checklist_unit.md`.)
    assert_eq!(
        problems("bad_graph_names_a_unit_it_cannot_read.md"),
        [(12, "the dependency graph (line 3) names `transform`, and its section here reads as no work unit: it has no sprint the reader knows, so `transform` and every dependency through it would be dropped".to_string())]
    );
}

/// Text the reader did not understand changes a plan's meaning silently:
/// a fence never closed swallowed the rest ("1 work unit, 1 sprint"), and
/// `### Sprint 1 Page` dropped its sprint. Both are refused at their line,
/// with the fix; an unclosed code span, which leaves a criterion to a
/// person, is warned of.
#[test]
fn text_the_reader_did_not_understand_is_named_with_its_line() {
    assert_eq!(
        problems("bad_unclosed_fence.md"),
        [(4, "this code block is never closed, so the rest of the plan is read as code, 1 heading included (from `## Sprint 2: Style`)".to_string())]
    );
    assert_eq!(
        problems("bad_sprint_without_colon.md"),
        [(4, "the heading `Sprint 1 Page` looks like a sprint but is not read as one: the sprint would be dropped".to_string())]
    );
    let p = plan::parse(
        "# Site\n\n## Sprint 1: Page\n**Exit criteria**:\n- [ ] `index.html exists\n",
        "site",
    )
    .expect("usable");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.line == 5 && w.message.contains("code span is not closed")),
        "{:?}",
        p.warnings
    );
    // An escape sequence in a sprint's name, a NUL in a unit's.
    for (src, line) in [
        ("# Site\n\n## Sprint 1: Page \u{1b}[2J\n- [ ] `a.txt` exists\n", 3),
        ("# Site\n\n| Work Unit |\n|---|\n| we\u{0}b |\n\n## web\n### Sprint 1: A\n- [ ] `a.txt` exists\n", 5),
    ] {
        let e = plan::parse(src, "site").expect_err("refused");
        assert!(
            e.iter().any(|p| p.line == line && p.message.contains("control character")),
            "{e:?}"
        );
    }
    // A fence closed by a longer one, and one of tildes, are closed.
    let p = plan::parse(
        "# Site\n\n## Sprint 1: Page\n~~~\nmake\n~~~~\n- [ ] `a.txt` exists\n",
        "site",
    )
    .expect("usable");
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
}

/// A graph node that is no unit and no section (a start, a deploy) drops
/// the edges through it: warned of, with the line, not silently.
#[test]
fn a_graph_node_that_is_no_unit_is_warned_of() {
    let src = "# Two\n\n```mermaid\ngraph TD\n  api --> deploy --> web\n  api --> wbe\n```\n\n## api\n### Sprint 1: A\n- [ ] `a.txt` exists\n\n## web\n### Sprint 1: W\n- [ ] `w.txt` exists\n";
    let p = plan::parse(src, "two").expect("usable");
    let warned: Vec<_> = p
        .warnings
        .iter()
        .map(|w| (w.line, w.message.clone(), w.hint.clone()))
        .collect();
    assert!(
        warned
            .iter()
            .any(|(l, m, _)| *l == 3 && m.contains("names `deploy`, which is no work unit")),
        "{warned:?}"
    );
    assert!(
        warned
            .iter()
            .any(|(_, m, h)| m.contains("`wbe`") && h.as_deref() == Some("did you mean `web`?")),
        "{warned:?}"
    );
}

#[test]
fn unknown_dependency_suggests_the_nearest_unit() {
    let Err(LoadError::Plan(e)) = plan::load(&fixture("bad_unknown_dependency.md")) else {
        panic!()
    };
    assert_eq!(
        e.problems[0].hint.as_deref(),
        Some("did you mean `engine`?")
    );
    let text = e.to_string();
    assert!(text.contains("bad_unknown_dependency.md:6:"), "{text}");
}

/// The same typo in a sentence, where prose about other things is common:
/// not an error, but a warning with the name it may mean.
#[test]
fn a_misspelt_unit_in_a_dependency_sentence_is_warned_of_with_the_nearest_name() {
    let src = "# Two\n\n## alpha\n### Sprint 1: A\n- [ ] `a.txt` exists\n\n## beta\nThis unit depends on alpah.\n\n### Sprint 1: B\n- [ ] `b.txt` exists\n";
    let p = plan::parse(src, "x").expect("a warning, not an error");
    assert!(p.unit("beta").unwrap().depends_on.is_empty());
    let w = p
        .warnings
        .iter()
        .find(|w| w.message.contains("alpah"))
        .unwrap_or_else(|| panic!("{:?}", p.warnings));
    assert_eq!(w.line, 8);
    assert_eq!(w.hint.as_deref(), Some("did you mean `alpha`?"));
    // Prose about something else is left alone.
    let other = src.replace("depends on alpah", "depends on the database");
    let p = plan::parse(&other, "x").unwrap();
    assert!(
        p.warnings
            .iter()
            .all(|w| !w.message.contains("names no work unit")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn seed_001_shape_reads_layers_template_and_progress_files() {
    let p = plan::load(&fixture("02_packages_layers.md")).unwrap().plan;
    assert_eq!(p.dependency_structure, DependencyStructure::Layers);
    let bib = p.unit("biblioteca").unwrap();
    assert_eq!(bib.depends_on, ["parser", "profiles", "validation"]);
    assert_eq!(bib.directory.as_deref(), Some("verificar-biblioteca"));
    let t = p.dispatch_template.as_ref().unwrap();
    assert!(t.variables.contains(&"<PACKAGE_NAME>".to_string()));
    assert!(p
        .referenced_files
        .iter()
        .any(|f| f.path == "verificar-parser/PROGRESS.md" && f.unit.as_deref() == Some("parser")));
}

#[test]
fn compound_ids_run_in_order_and_types_are_classified() {
    let p = plan::load(&fixture("08_compound_ids.md")).unwrap().plan;
    let ids: Vec<_> = p.work_units[0]
        .sprints
        .iter()
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(ids, ["1", "2a", "2b", "10"]);
    let p = plan::load(&fixture("09_sprint_types.md")).unwrap().plan;
    let kinds: Vec<_> = p.work_units[0].sprints.iter().map(|s| s.kind).collect();
    use SprintType::*;
    assert_eq!(
        kinds,
        [Code, Command, Background, Deferred, Manual, Command]
    );
}

/// `**Type**: command` on one line opens no list: the tasks under it stay
/// tasks (they were dropped as notes, and the agent never saw them).
#[test]
fn a_one_line_type_keeps_the_tasks_beneath_it() {
    let p = plan::parse(
        "# R\n\n## Sprint 1: Migrate\n**Type**: command\n- Execute `make migrate`\n\n**Exit criteria**:\n- [ ] `make status` exits 0\n",
        "R",
    )
    .unwrap();
    let s = &p.work_units[0].sprints[0];
    assert_eq!(s.kind, SprintType::Command);
    assert_eq!(s.tasks, ["Execute `make migrate`"]);
    assert_eq!(s.exit_criteria.len(), 1);
}

/// A file that must contain quoted text is a check the verifier runs, as
/// it is with the text in a code span.
#[test]
fn contains_with_quoted_text_is_a_file_check() {
    let p = plan::parse(
        "# R\n\n## Sprint 1: Report\n- [ ] `report.html` contains \"Total\"\n- [ ] `a.txt` contains “done”\n- [ ] `b.txt` contains `x`\n",
        "R",
    )
    .unwrap();
    let found: Vec<_> = p.work_units[0].sprints[0]
        .exit_criteria
        .iter()
        .map(|c| c.assertion.clone())
        .collect();
    use supervise::plan::Assertion::FileContains;
    let contains = |path: &str, text: &str| {
        Some(FileContains {
            path: path.into(),
            text: text.into(),
        })
    };
    assert_eq!(
        found,
        [
            contains("report.html", "Total"),
            contains("a.txt", "done"),
            contains("b.txt", "x")
        ]
    );
}

#[test]
fn crlf_bom_and_non_ascii_names_are_read() {
    let p = plan::load(&fixture("10_crlf_bom_dependencies_column.md"))
        .unwrap()
        .plan;
    assert_eq!(p.title, "Übersetzung");
    assert_eq!(
        p.unit("extra-spalte").unwrap().depends_on,
        ["kern", "oberfläche"]
    );
    assert_eq!(p.unit("oberfläche").unwrap().sprints[0].line, 16);
}

#[test]
fn cli_exit_status_follows_usability() {
    let bin = env!("CARGO_BIN_EXE_supervise");
    let ok = std::process::Command::new(bin)
        .args(["plan", "show", "--json"])
        .arg(fixture("03_sections_depends_on.md"))
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["work_units"][1]["depends_on"][0], "api");
    let bad = std::process::Command::new(bin)
        .args(["plan", "show"])
        .arg(fixture("bad_cycle.md"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("bad_cycle.md:5: dependency cycle"));
    let missing = std::process::Command::new(bin)
        .args(["plan", "show"])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("Cannot find EXECUTION_PLAN.md"));
}

fn markdownish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("# Title\n".to_string()),
        Just("## Sprint 1: A\n".to_string()),
        Just("### Sprint 2a: B\n".to_string()),
        Just("## Work Unit: x\n".to_string()),
        Just("| Package | Layer | Dependencies |\n|---|---|---|\n| x | 1 | y |\n".to_string()),
        Just("| Sprint | Name |\n|---|---|\n| 1 | n |\n".to_string()),
        Just("- [ ] `make test` passes\n".to_string()),
        Just("**Exit criteria**:\n".to_string()),
        Just("```mermaid\ngraph TD\n x --> y\n```\n".to_string()),
        Just("```\nx ──► y\n```\n".to_string()),
        Just("### Task 1.1: t\n".to_string()),
        Just("x depends on y\n".to_string()),
        "[ -~\u{e9}\u{2014}\u{feff}\r\n|`*#<>{}$]{0,40}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn random_markdown_never_panics(src in markdownish()) {
        match plan::parse(&src, "fallback") {
            Ok(p) => {
                prop_assert!(p.total_sprints() > 0);
                for u in &p.work_units {
                    prop_assert!(!u.sprints.is_empty());
                    for d in &u.depends_on { prop_assert!(p.unit(d).is_some()); }
                }
            }
            Err(problems) => prop_assert!(!problems.is_empty() && problems.iter().all(|p| p.line >= 1)),
        }
    }

    #[test]
    fn arbitrary_text_never_panics(src in "\\PC{0,400}") {
        let _ = plan::parse(&src, "fallback");
    }
}

#[test]
fn task_header_plans_keep_their_criteria_wherever_they_stand() {
    let loaded = plan::load(&fixture("14_task_headers_criteria.md")).unwrap();
    let sprints = &loaded.plan.work_units[0].sprints;
    assert_eq!(sprints.len(), 2);
    let exit = |i: usize| -> Vec<String> {
        sprints[i]
            .exit_criteria
            .iter()
            .map(|c| c.text.clone())
            .collect()
    };
    assert_eq!(
        exit(0),
        [
            "cargo test heading passes",
            "cargo test levels passes",
            "File src/levels.rs exists",
            "cargo doc --no-deps succeeds"
        ]
    );
    assert_eq!(exit(1), ["cargo test render passes"]);
    for s in sprints {
        assert!(
            s.tasks.iter().all(|t| !t.contains("cargo test")),
            "a criterion became a task: {:?}",
            s.tasks
        );
    }
    assert!(sprints[0]
        .tasks
        .iter()
        .any(|t| t.contains("Write the module docs")));
}

#[test]
fn seed_001_short_dependency_names_keywords_and_plan_wide_checks() {
    let loaded = plan::load(&fixture("15_seed001_short_dependencies.md")).unwrap();
    let p = &loaded.plan;
    let deps = |n: &str| p.unit(n).unwrap().depends_on.clone();
    let mut v = deps("SwiftVerificar-validation");
    v.sort();
    assert_eq!(
        v,
        [
            "SwiftVerificar-parser",
            "SwiftVerificar-validation-profiles"
        ]
    );
    let mut b = deps("SwiftVerificar-biblioteca");
    b.sort();
    assert_eq!(
        b,
        [
            "SwiftVerificar-parser",
            "SwiftVerificar-validation",
            "SwiftVerificar-validation-profiles"
        ]
    );
    for u in &p.work_units {
        let s = &u.sprints[0];
        assert!(
            s.entry_criteria
                .iter()
                .any(|c| c.command.as_deref() == Some("swift build")),
            "{}",
            u.name
        );
        let exit: Vec<&str> = s.exit_criteria.iter().map(|c| c.text.as_str()).collect();
        assert!(exit.contains(&"swift test passes"), "{}: {exit:?}", u.name);
        assert!(
            exit.contains(&"No force unwraps were added"),
            "{}: {exit:?}",
            u.name
        );
    }
    let w = p
        .warnings
        .iter()
        .find(|w| w.message.contains("SwiftVerificar-extras"))
        .expect("a warning for the unlisted section");
    assert_eq!(w.line, 41);
    assert!(w.message.contains("does not list it"), "{w}");
}

#[test]
fn a_dependency_that_fits_several_units_or_none_is_refused_with_the_nearest_name() {
    let src = "# X\n\n| Unit | Dependencies |\n|---|---|\n| core-api | none |\n| web-api | none |\n| app | api |\n| docs | web-apii |\n\n\
## core-api\n### Sprint 1: A\n- [ ] `make` passes\n## web-api\n### Sprint 1: A\n- [ ] `make` passes\n\
## app\n### Sprint 1: A\n- [ ] `make` passes\n## docs\n### Sprint 1: A\n- [ ] `make` passes\n";
    let problems = plan::parse(src, "x").unwrap_err();
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("`api`, which could be any of `core-api`, `web-api`")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t
                .contains("`web-apii`, which the plan does not define (did you mean `web-api`?)")),
        "{text:?}"
    );
    let spaced = src
        .replace("| app | api |", "| app | Core API |")
        .replace("web-apii", "WEB_API");
    let p = plan::parse(&spaced, "x").unwrap();
    assert_eq!(p.unit("app").unwrap().depends_on, ["core-api"]);
    assert_eq!(p.unit("docs").unwrap().depends_on, ["web-api"]);
}

/// `supervise plan evaluate` settles in one pass: over every plan of the
/// corpus (and each plan the rewrite makes from it), evaluating again what
/// one evaluation wrote changes nothing more.
#[test]
fn evaluate_twice_is_evaluate_once() {
    let mut rewritten = 0;
    // The corpus, what breakdown makes of each requirements document, and a
    // unit whose one sprint does too much of two things.
    let mut plans: Vec<(String, String)> = fixtures()
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/requirements");
    for e in std::fs::read_dir(docs).unwrap() {
        let p = e.unwrap().path();
        let doc = std::fs::read_to_string(&p).unwrap();
        let b = supervise::plan::tools::breakdown::breakdown(&doc, "project");
        plans.push((format!("breakdown of {}", p.display()), b.plan));
    }
    let mut big = String::from("# Big\n\n| Work Unit | Directory |\n|---|---|\n| api | api |\n\n## api\n\n### Sprint 1: Everything\n\n**Tasks**:\n\n");
    for i in 1..=9 {
        big.push_str(&format!(
            "{i}. Add the handler `api/src/h{i}.rs` and its tests\n"
        ));
    }
    for i in 1..=5 {
        big.push_str(&format!(
            "{}. Write the deploy manifest `deploy/m{i}.yaml`\n",
            9 + i
        ));
    }
    big.push_str(
        "\n**Exit criteria**:\n\n- [ ] `cargo test -p api` passes\n- [ ] `deploy/m1.yaml` exists\n",
    );
    plans.push(("a sprint of two concerns, over its budget".into(), big));
    for (name, source) in plans {
        let Ok(plan) = supervise::plan::parse(&source, &name) else {
            continue;
        };
        let once = supervise::plan::tools::rewrite::evaluated(&plan, &source, 50);
        let again_plan = supervise::plan::parse(&once.text, &name)
            .unwrap_or_else(|p| panic!("{name}: the rewrite does not read back: {p:?}"));
        rewritten += usize::from(once.text != source);
        let twice = supervise::plan::tools::rewrite::evaluated(&again_plan, &once.text, 50);
        assert_eq!(
            twice.text, once.text,
            "{name}: a second evaluation changed the first's plan ({:?})",
            twice.changes
        );
    }
    // The property is tried on plans the first pass did change.
    assert!(rewritten >= 1, "no plan was rewritten");
}

/// Round five, item 8: a sprint heading one level down, spelt in words or
/// written in bold is the next sprint, never a part of the one above.
#[test]
fn every_shape_of_a_second_sprint_heading_is_its_own_sprint() {
    for second in [
        "### Sprint 2: Page",
        "### Sprint 2 — Page",
        "#### Sprint 2: Page",
        "### Sprint Two: Page",
        "**Sprint 2: Page**",
    ] {
        let src = format!(
            "# Site\n\n## Sprint 1: A\n\n- Write a.txt\n\n**Exit criteria:**\n- [ ] File `a.txt` exists\n\n\
             {second}\n\n- Write page.txt\n\n**Exit criteria:**\n- [ ] File `page.txt` exists\n"
        );
        let p = plan::parse(&src, "site").unwrap_or_else(|e| panic!("{second}: {e:?}"));
        let sprints = &p.work_units[0].sprints;
        let exits: Vec<Vec<&str>> = sprints
            .iter()
            .map(|s| s.exit_criteria.iter().map(|c| c.text.as_str()).collect())
            .collect();
        assert_eq!(
            exits,
            [vec!["File a.txt exists"], vec!["File page.txt exists"]],
            "{second}"
        );
        assert_eq!(sprints[1].id.as_str(), "2", "{second}");
        assert_eq!(sprints[1].name, "Page", "{second}");
    }
}

/// Round five, item 7: a unit whose only sprint is a checklist under a
/// heading is a unit, with the dependency its prose states; and a unit table's
/// units may hold checklist groups (the hint names them, §2b reads them).
#[test]
fn a_unit_made_of_checklist_groups_is_read_with_its_dependency() {
    let prose = "# Data pipeline\n\n## Ingest\n\n### Sprint 1: Fetch\n\n- [ ] File `fetch.py` exists\n\n\
                 ## Report\n\nDepends on ingest.\n\n### Build the report\n\n- [ ] File `report.py` exists\n";
    let tabled = "# Data pipeline\n\n| Unit | Depends on |\n|------|------------|\n| ingest | — |\n| report | ingest |\n\n\
                  ## ingest\n\n### Fetch\n\n- [ ] File `fetch.py` exists\n\n## report\n\n### Build\n\n- [ ] File `report.py` exists\n";
    for (shape, src) in [("prose", prose), ("table", tabled)] {
        let p = plan::parse(src, "pipeline").unwrap_or_else(|e| panic!("{shape}: {e:?}"));
        let units: Vec<(String, Vec<String>, usize)> = p
            .work_units
            .iter()
            .map(|u| {
                (
                    u.name.to_lowercase(),
                    u.depends_on.iter().map(|d| d.to_lowercase()).collect(),
                    u.sprints.len(),
                )
            })
            .collect();
        assert_eq!(
            units,
            [
                ("ingest".to_string(), vec![], 1),
                ("report".to_string(), vec!["ingest".to_string()], 1)
            ],
            "{shape}"
        );
    }
}
