//! `supervise plan …`: show what the reader found in a plan.

use crate::plan::{self, LoadError, Plan};
use std::fmt::Write as _;
use std::path::Path;

/// Renders the plan for people: units, their sprints, criteria and files.
pub fn render_tree(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", plan.title);
    if let Some(name) = &plan.feature_name {
        let _ = writeln!(out, "Operation: {name}");
    }
    let _ = writeln!(
        out,
        "{} work unit(s), {} sprint(s); dependencies: {}; prompts: {}",
        plan.work_units.len(),
        plan.total_sprints(),
        plan.dependency_structure.as_str(),
        plan.dispatch_mode.as_str(),
    );
    for u in &plan.work_units {
        let deps = if u.depends_on.is_empty() {
            "—".to_string()
        } else {
            u.depends_on.join(", ")
        };
        let _ = writeln!(
            out,
            "\n■ {} (line {}) layer {} · depends on: {}{}",
            u.name,
            u.line,
            u.layer,
            deps,
            u.directory
                .as_ref()
                .map(|d| format!(" · dir {d}"))
                .unwrap_or_default()
        );
        for s in &u.sprints {
            let _ = writeln!(
                out,
                "  ├ Sprint {}: {} [{}] (line {})",
                s.id, s.name, s.kind, s.line
            );
            for t in &s.tasks {
                let _ = writeln!(out, "  │   task  {t}");
            }
            for (label, list) in [("entry", &s.entry_criteria), ("exit ", &s.exit_criteria)] {
                for c in list {
                    let _ = writeln!(out, "  │   {label} {:<10} {}", c.kind.as_str(), c.text);
                }
            }
        }
    }
    if !plan.referenced_files.is_empty() {
        let _ = writeln!(out, "\nReferenced files:");
        for f in &plan.referenced_files {
            let _ = writeln!(
                out,
                "  {} ({})",
                f.path,
                if f.exists {
                    "exists"
                } else {
                    "will be created"
                }
            );
        }
    }
    if let Some(t) = &plan.dispatch_template {
        let _ = writeln!(
            out,
            "\nDispatch template at line {} with variables: {}",
            t.line,
            t.variables.join(" ")
        );
    }
    for w in &plan.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out
}

/// `supervise plan show`: exit status 0 for a usable plan, 1 otherwise.
pub fn show(path: Option<&Path>, json: bool) -> anyhow::Result<i32> {
    let cwd = std::env::current_dir()?;
    let loaded = match plan::locate(path, &cwd).and_then(|p| plan::load(&p)) {
        Ok(l) => l,
        Err(LoadError::Plan(e)) if json => {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({ "path": e.path, "problems": e.problems })
                )?
            );
            return Ok(1);
        }
        Err(e) => {
            eprint!("{e}");
            if !e.to_string().ends_with('\n') {
                eprintln!();
            }
            return Ok(1);
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&loaded.plan)?);
    } else {
        print!("{}", render_tree(&loaded.plan));
    }
    Ok(0)
}
