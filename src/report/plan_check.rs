//! The `supervise: plan` check run on a pull request that changes a plan: the
//! analysis verdict of each changed plan and annotations on its lines. A plan
//! the reader cannot read (a missing field, a cycle, an unknown dependency)
//! fails the check; what the analysis finds otherwise warns and never fails.

use crate::plan::tools::analyze::{analyze, Severity};
use std::fmt::Write as _;

/// The check's name on the pull request.
pub const NAME: &str = "supervise: plan";

/// GitHub takes at most this many annotations per request.
pub const MAX_ANNOTATIONS: usize = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Failure,
    Warning,
    Notice,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Failure => "failure",
            Level::Warning => "warning",
            Level::Notice => "notice",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Annotation {
    pub path: String,
    /// 1-based; a finding about the plan as a whole is put on line 1.
    pub line: usize,
    pub level: Level,
    pub title: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanCheck {
    /// `success`, `neutral` (warnings) or `failure` (a plan that cannot run).
    pub conclusion: &'static str,
    pub title: String,
    pub summary: String,
    pub annotations: Vec<Annotation>,
}

/// Checks each changed plan (`(path, text)`; `None`: deleted) together.
pub fn plan_check(plans: &[(String, String)], max_turns: u32) -> PlanCheck {
    let mut annotations = Vec::new();
    let mut summary = String::new();
    let (mut unreadable, mut warned) = (0, 0);
    for (path, source) in plans {
        let name = path.rsplit('/').next().unwrap_or(path);
        match crate::plan::parse(source, name) {
            Err(problems) => {
                unreadable += 1;
                let _ = writeln!(
                    summary,
                    "- `{path}`: **cannot be run** — {} problem(s) the reader stops at.",
                    problems.len()
                );
                for p in problems {
                    let message = match &p.hint {
                        Some(h) => format!("{}\n{h}", p.message),
                        None => p.message.clone(),
                    };
                    annotations.push(Annotation {
                        path: path.clone(),
                        line: p.line.max(1),
                        level: Level::Failure,
                        title: "The plan cannot be read".into(),
                        message,
                    });
                }
            }
            Ok(plan) => {
                let a = analyze(&plan, source, max_turns);
                let critical = a.critical();
                let recommended = a
                    .findings
                    .iter()
                    .filter(|f| f.severity == Severity::Recommended)
                    .count();
                if critical > 0 {
                    warned += 1;
                }
                let _ = writeln!(
                    summary,
                    "- `{path}`: {}, {}; findings: {critical} critical, {recommended} recommended; critical path {} ({}).",
                    crate::text::count(plan.work_units.len(), "unit"),
                    crate::text::count(plan.total_sprints(), "sprint"),
                    a.critical_path.0.join(" → "),
                    crate::text::count(a.critical_path.1, "sprint")
                );
                for f in &a.findings {
                    let level = match f.severity {
                        Severity::Critical => Level::Warning,
                        Severity::Recommended | Severity::Optional => Level::Notice,
                    };
                    annotations.push(Annotation {
                        path: path.clone(),
                        line: f.line.max(1),
                        level,
                        title: format!("Pass {}: {}", f.pass, f.location),
                        message: format!("{}\nRecommendation: {}", f.problem, f.recommendation),
                    });
                }
            }
        }
    }
    // Failures first, so a long list never crowds them out.
    annotations.sort_by_key(|a| (a.level != Level::Failure, a.level != Level::Warning));
    let shown = annotations.len().min(MAX_ANNOTATIONS);
    if annotations.len() > shown {
        let _ = writeln!(
            summary,
            "\n{} annotation(s) are not shown (GitHub takes {MAX_ANNOTATIONS}); `supervise plan analyze` lists them all.",
            annotations.len() - shown
        );
    }
    annotations.truncate(shown);
    let (conclusion, title) = if unreadable > 0 {
        ("failure", format!("{unreadable} plan(s) cannot be run"))
    } else if warned > 0 {
        (
            "neutral",
            format!("{warned} plan(s) with critical findings"),
        )
    } else {
        ("success", "The plan reads and analyses cleanly".to_string())
    };
    PlanCheck {
        conclusion,
        title,
        summary,
        annotations,
    }
}

/// Whether a changed file is a plan the check reads.
pub fn is_plan_file(path: &str) -> bool {
    path.rsplit('/').next() == Some("EXECUTION_PLAN.md")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "# Shop\n\n## Prerequisites\n- Rust 1.80\n\n## Goals\n- `cargo test` passes\n\n| Work Unit | Dependencies |\n|---|---|\n| core | none |\n\n## core\n### Sprint 1: Define the core types\n- Create `src/types.rs` with the `Order` struct\n- [ ] `cargo test` passes\n";

    #[test]
    fn a_plan_that_cannot_run_fails_with_its_lines_and_findings_only_warn() {
        let cycle = "# Loop\n\n| Work Unit | Dependencies |\n|---|---|\n| a | b |\n| b | a |\n\n## a\n### Sprint 1: One\n- [ ] `make a` passes\n## b\n### Sprint 1: One\n- [ ] `make b` passes\n";
        let c = plan_check(&[("plans/EXECUTION_PLAN.md".into(), cycle.into())], 50);
        assert_eq!(c.conclusion, "failure");
        assert!(c.annotations.iter().all(|a| a.level == Level::Failure));
        assert!(c
            .annotations
            .iter()
            .all(|a| a.line >= 1 && a.path == "plans/EXECUTION_PLAN.md"));
        assert!(
            c.annotations.iter().any(|a| a.message.contains("cycle")),
            "{:?}",
            c.annotations
        );
        let vague = "# Shop\n\n| Work Unit | Dependencies |\n|---|---|\n| web | none |\n\n## web\n### Sprint 1: Pages\n- Make the pages look good (framework TBD)\n- [ ] the pages look good\n";
        let c = plan_check(&[("EXECUTION_PLAN.md".into(), vague.into())], 50);
        assert_ne!(c.conclusion, "failure", "findings never fail the check");
        // On the sprint's heading (line 8), as warnings.
        assert!(
            c.annotations
                .iter()
                .any(|a| a.line == 8 && a.level == Level::Warning),
            "{:?}",
            c.annotations
        );
        let c = plan_check(&[("EXECUTION_PLAN.md".into(), GOOD.into())], 50);
        assert_ne!(c.conclusion, "failure");
    }

    #[test]
    fn only_files_named_like_a_plan_are_checked() {
        assert!(is_plan_file("EXECUTION_PLAN.md"));
        assert!(is_plan_file("docs/v2/EXECUTION_PLAN.md"));
        assert!(!is_plan_file("EXECUTION_PLAN.md.bak"));
        assert!(!is_plan_file("README.md"));
    }
}
