//! Snapshot tests of every report, from deterministic engine runs.

mod common;

use common::*;
use supervise::engine::*;
use supervise::report;

fn output_file(d: &DispatchId) -> String {
    format!(".supervise/runs/{}/output.log", d.0.replace('/', "_"))
}

/// A run with a retry, a partial continuation and a blocked unit, mid-flight.
fn mid_run() -> Sim {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.finish("api", partial());
    sim.finish("api", success());
    for _ in 0..3 {
        sim.finish("docs", failure());
    }
    sim
}

#[test]
fn status_table_with_a_blocked_unit() {
    let sim = mid_run();
    insta::assert_snapshot!(report::status_table(sim.st(), sim.now));
}

#[test]
fn supervisor_state_md_follows_section_8() {
    let sim = mid_run();
    let md = report::supervisor_state_md(sim.st(), &output_file);
    for heading in [
        "## Plan Summary",
        "## Work Units",
        "### api",
        "- Work unit state: RUNNING",
        "## Active Agents",
        "## Decisions Log",
        "## Overall Status",
    ] {
        assert!(md.contains(heading), "missing {heading}");
    }
    insta::assert_snapshot!(md);
}

#[test]
fn complete_md_and_final_verification_at_the_end() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.finish("api", success());
    sim.finish("docs", failure());
    let mut no_commit = success();
    no_commit.evidence.criteria.clear();
    sim.finish("docs", success());
    sim.finish("api", success());
    sim.finish("web", success());
    assert_eq!(sim.st().status, OverallStatus::Completed);
    assert_eq!(report::complete_file_name(sim.st()), "COMPLETE_SHOP.md");
    let md = report::complete_md(sim.st(), sim.now);
    assert!(md.contains("```mermaid\ngantt"));
    assert!(md.contains("```mermaid\ngraph LR"));
    insta::assert_snapshot!("complete_md", md);
    insta::assert_snapshot!(
        "final_summary",
        report::final_summary(sim.st(), &report::complete_file_name(sim.st()))
    );
    insta::assert_snapshot!("status_complete", report::status_table(sim.st(), sim.now));
    // The clock stopped with the operation: an hour on, it ran as long.
    let later = report::status_table(sim.st(), sim.now + chrono::Duration::hours(1));
    assert!(later.contains(" · ran 35m 00s · "), "{later}");
}

#[test]
fn a_sprint_whose_criteria_got_no_result_is_not_verified() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let mut weak = success();
    weak.evidence.criteria.clear();
    sim.finish("api", weak.clone());
    assert_eq!(
        sim.unit("api").sprints[0].continuations,
        1,
        "PARTIAL, not COMPLETED"
    );
    let remaining = &sim.unit("api").sprints[0].remaining;
    assert!(
        remaining
            .iter()
            .any(|r| r.contains("make api-types passes (not checked")),
        "{remaining:?}"
    );
    // Results that name another sprint's criteria count for nothing.
    let mut other = success();
    other.evidence.criteria[0].text = "make api passes".into();
    sim.finish_as_is("api", other);
    assert_ne!(sim.sprint_status("api", 0), SprintStatus::Completed);
    let v = report::verification(sim.st());
    assert!(!v.passed());
}

#[test]
fn kill_summary_lists_uncommitted_work() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.finish("api", success());
    sim.send(Input::Killall).unwrap();
    let api = sim.unit("api").active().unwrap().id.clone();
    let mut r = failure();
    r.evidence.uncommitted = vec!["src/handlers.rs".into()];
    sim.send(Input::AgentFinished {
        dispatch: api,
        report: r,
    })
    .unwrap();
    insta::assert_snapshot!(report::kill_summary(sim.st()));
}

#[test]
fn a_finished_unit_keeps_the_model_and_attempt_of_its_last_sprint() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    sim.finish("docs", failure());
    sim.finish("docs", failure());
    sim.finish("docs", success());
    assert_eq!(sim.unit("docs").status, UnitStatus::Completed);
    let md = report::supervisor_state_md(sim.st(), &output_file);
    let docs = &md[md.find("### docs").unwrap()..];
    let docs = &docs[..docs[4..].find("### ").map_or(docs.len(), |i| i + 4)];
    assert!(docs.contains("- Model: opus"), "{docs}");
    assert!(docs.contains("- Attempt: 3 of 3"), "{docs}");
    let table = report::status_table(sim.st(), sim.now);
    let row = table.lines().find(|l| l.starts_with("| docs ")).unwrap();
    assert!(row.contains("| opus | 3/3 |"), "{row}");
}

#[test]
fn human_checked_criteria_need_a_person_and_are_neither_pass_nor_failure() {
    let src = "# Guide\n\n## Sprint 1: Write the guide\n**Exit criteria**:\n- [ ] The guide reads well to a newcomer\n- [ ] `docs/guide.md` exists\n";
    let mut sim = Sim::start(src, EngineConfig::default());
    let unit = sim.st().units[0].name.clone();
    let mut r = success();
    let exists = &sim.st().plan.work_units[0].sprints[0].exit_criteria[1];
    r.evidence.criteria = vec![CriterionResult {
        line: exists.line,
        text: exists.text.clone(),
        outcome: CriterionOutcome::Passed,
        detail: String::new(),
    }];
    sim.finish(&unit, r);
    assert_eq!(sim.st().status, OverallStatus::Completed);
    let v = report::verification(sim.st());
    assert!(v.passed(), "{:?}", v.issues);
    assert_eq!(
        v.needs_person,
        ["Guide Sprint 1: The guide reads well to a newcomer"]
    );
    let md = report::complete_md(sim.st(), sim.now);
    assert!(md.contains("✓ VERIFICATION PASSED"), "{md}");
    assert!(!md.contains("**Result**: ✗"), "{md}");
    assert!(md.contains("### Needs a Person\n"), "{md}");
    assert!(
        md.contains("1/1 machine-checkable criteria verified ✓; 1 need a person"),
        "{md}"
    );
    for section in [
        "### Estimation Accuracy",
        "### Time Distribution",
        "**Critical Path**: Guide Sprint 1",
    ] {
        assert!(md.contains(section), "missing {section}");
    }
}

/// The web view's timeline of the same run: one bar per attempt coloured by
/// tier, the retries of the BLOCKED unit in its red row, the critical path
/// marked. Drawn on the server, so it is a snapshot like every report.
#[test]
fn the_web_timeline_of_a_run_with_a_retry_and_a_blocked_unit() {
    let sim = mid_run();
    insta::assert_snapshot!(report::web::gantt::gantt_svg(sim.st(), sim.now).replace("><", ">\n<"));
}

/// The page's live part shows what an agent printed as text, never as markup.
#[test]
fn what_an_agent_printed_reaches_the_page_as_text() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let mut hostile = failure();
    hostile.output_tail = "<script>alert(1)</script><img src=x onerror=alert(2)>".into();
    for _ in 0..3 {
        sim.finish("docs", hostile.clone());
    }
    let html = report::web::live_fragment(sim.st(), &report::web::Origin::local(), sim.now);
    assert!(
        !html.contains("<script") && !html.contains("<img"),
        "{html}"
    );
    assert!(html.contains("BLOCKED: docs"), "{html}");
}

mod dollars {
    //! Every dollar figure people see, held to one another and to the log.

    use super::*;
    use proptest::prelude::*;
    use supervise::engine::usage::{Price, Usage, Usd};

    /// What an attempt does: succeed, do part, or fail; and what it
    /// reports: a dollar figure, tokens only, or nothing.
    fn report(outcome: u8, reported: u8, micros: u64) -> AgentReport {
        let mut r = match outcome % 3 {
            0 => success(),
            1 => partial(),
            _ => failure(),
        };
        r.usage = match reported % 3 {
            0 => Some(Usage {
                input_tokens: 1000,
                output_tokens: 200,
                cost: Some(Usd::from_micros(micros)),
                ..Default::default()
            }),
            1 => Some(Usage {
                input_tokens: micros,
                output_tokens: micros / 7,
                cache_read_tokens: micros / 3,
                ..Default::default()
            }),
            _ => None,
        };
        r
    }

    /// The number after `prefix` in `text`, as a Usd (`$1.23` or `$0.0123`).
    fn dollars_after(text: &str, prefix: &str) -> Option<Usd> {
        let at = text.find(prefix)? + prefix.len();
        let figure: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        figure.parse().ok()
    }

    /// A figure shown to people: to the cent above a dollar, else to the
    /// hundredth of a cent.
    fn shown(u: Usd) -> Usd {
        u.to_string().parse().unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// However attempts end and whatever they report: the store's log
        /// (each closed attempt's record), the operation's sum, the
        /// breakdowns by unit, sprint and model, `spend`, the web API, the
        /// status footer and the final report give the same dollars.
        #[test]
        fn every_view_of_the_dollars_agrees(
            steps in proptest::collection::vec((any::<u8>(), any::<u8>(), 1u64..3_000_000), 1..30),
        ) {
            let price = Price {
                input: Usd::from_micros(3_000_000),
                output: Usd::from_micros(15_000_000),
                ..Default::default()
            };
            let config = EngineConfig {
                prices: ModelTier::ALL
                    .iter()
                    .map(|t| (EngineConfig::default().model_id(*t).to_string(), price))
                    .collect(),
                ..Default::default()
            };
            let mut sim = Sim::start(THREE_UNITS, config);
            for (outcome, reported, micros) in steps {
                let Some(o) = sim.out().first().cloned() else { break };
                sim.finish(&o.unit, report(outcome, reported, micros));
            }
            let st = sim.st().clone();
            // The log, as the store keeps it: each closed, paid attempt's
            // own figure, else its tokens at the price.
            let from_log: Usd = sim
                .log
                .iter()
                .filter_map(|e| match e {
                    Event::AttemptClosed { record, .. } if record.charged => {
                        record.usage.and_then(|u| u.dollars(Some(&price)))
                    }
                    _ => None,
                })
                .sum();
            prop_assert_eq!(st.dollars_spent(), from_log);
            let b = report::money::breakdown(&st);
            prop_assert_eq!(b.total, from_log);
            prop_assert_eq!(b.by_unit.iter().map(|u| u.1).sum::<Usd>(), from_log);
            prop_assert_eq!(b.by_sprint.iter().map(|s| s.2).sum::<Usd>(), from_log);
            prop_assert_eq!(b.by_model.iter().map(|m| m.1).sum::<Usd>(), from_log);
            prop_assert_eq!(b.by_model.iter().map(|m| m.2).sum::<usize>(), b.attempts);
            let rows = report::spend(std::slice::from_ref(&st), sim.now);
            prop_assert_eq!(rows[0].usd.total, from_log);
            prop_assert_eq!(rows[0].usd.day, from_log);
            let web = report::web::summary(&st, report::web::Origin::local());
            prop_assert_eq!(web.usd_spent.unwrap_or_default(), from_log);
            let status = report::status_table(&st, sim.now);
            let summary = report::final_summary(&st, &report::complete_file_name(&st));
            if b.attempts > 0 {
                prop_assert_eq!(dollars_after(&status, "Spend: $"), Some(shown(from_log)), "{}", status);
                prop_assert_eq!(dollars_after(&summary, "- Spent: $"), Some(shown(from_log)), "{}", summary);
            } else {
                prop_assert!(!status.contains("Spend: $"), "{}", status);
                prop_assert!(!summary.contains("- Spent: $"), "{}", summary);
            }
        }
    }

    /// The line after `prefix` in `text`, up to its end.
    fn line_after<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        let at = text.find(prefix)? + prefix.len();
        text[at..].lines().next()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// However attempts end: the paid dispatches by model, their sum in
        /// the completion summary's table and the operation's time are one
        /// figure in the final summary, COMPLETE and the status table, and
        /// that figure is the log's (each charged attempt closed).
        #[test]
        fn every_view_of_the_dispatches_and_the_time_agrees(
            steps in proptest::collection::vec((any::<u8>(), any::<u8>(), 1u64..3_000_000), 1..30),
        ) {
            let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
            for (outcome, reported, micros) in steps {
                let Some(o) = sim.out().first().cloned() else { break };
                sim.now += chrono::Duration::seconds(37);
                sim.finish(&o.unit, report(outcome, reported, micros));
            }
            let st = sim.st().clone();
            let mut from_log: std::collections::BTreeMap<&str, usize> = Default::default();
            for e in &sim.log {
                if let Event::AttemptClosed { record, .. } = e {
                    if record.charged {
                        *from_log.entry(record.tier.as_str()).or_default() += 1;
                    }
                }
            }
            let expected = if from_log.is_empty() {
                "(none yet)".to_string()
            } else {
                ModelTier::ALL
                    .iter()
                    .map(|t| format!("{}×{}", t.as_str(), from_log.get(t.as_str()).copied().unwrap_or(0)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let complete = report::complete_md(&st, sim.now);
            let summary = report::final_summary(&st, &report::complete_file_name(&st));
            prop_assert_eq!(line_after(&complete, "- Paid dispatches by model: "), Some(expected.as_str()));
            prop_assert_eq!(line_after(&summary, "- Paid dispatches by model: "), Some(expected.as_str()), "{}", summary);
            // The one time: COMPLETE's, the summary's and the cadence's.
            let times: Vec<&str> = [
                line_after(&complete, "- Total time: "),
                line_after(&summary, "- Total time: ").map(|l| l.split(" (").next().unwrap_or(l)),
                line_after(&complete, "- **Total time**: ").map(|l| l.split(" (").next().unwrap_or(l)),
            ]
            .into_iter()
            .flatten()
            .collect();
            prop_assert!(times.windows(2).all(|w| w[0] == w[1]), "{:?}", times);
            if st.status == OverallStatus::Completed {
                let table = report::status_table(&st, sim.now);
                for t in ModelTier::ALL {
                    let n = from_log.get(t.as_str()).copied().unwrap_or(0);
                    let row = table
                        .lines()
                        .find(|l| l.starts_with(&format!("| {} |", t.as_str())))
                        .unwrap_or_default()
                        .to_string();
                    let dispatches = row.split('|').nth(3).map(str::trim).unwrap_or_default().to_string();
                    prop_assert_eq!(dispatches, n.to_string(), "{}", table);
                }
            }
        }
    }
}

/// Round five, item 14: a second killall's summary counts the agents it
/// terminated — what its notice said — not those an earlier kill ended.
#[test]
fn a_second_killalls_summary_counts_only_its_own_agents() {
    let mut sim = Sim::start(THREE_UNITS, EngineConfig::default());
    let kill_and_settle = |sim: &mut Sim| -> String {
        let d = sim.send(Input::Killall).unwrap();
        let said = d
            .effects
            .iter()
            .find_map(|e| match e {
                Effect::Notify { text, .. } => Some(text.clone()),
                _ => None,
            })
            .expect("killall's notice");
        for o in sim.out() {
            sim.advance(1);
            let report = sim.for_order(&o, failure());
            sim.send(Input::AgentFinished {
                dispatch: o.dispatch.clone(),
                report,
            })
            .unwrap();
        }
        said
    };
    let first = kill_and_settle(&mut sim);
    sim.advance(60);
    sim.send(Input::Resume { unit: None }).unwrap();
    sim.advance(60);
    let second = kill_and_settle(&mut sim);
    let n: usize = second.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 1, "{first} / {second}");
    let summary = report::kill_summary(sim.st());
    assert!(
        summary.contains(&format!("Agents terminated: {n}\n")),
        "the notice said {second:?}, the summary:\n{summary}"
    );
}
