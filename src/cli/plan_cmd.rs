//! `supervise plan …`: show what the reader found in a plan, and the plan
//! tools (§16–§18) on it.

use crate::plan::{self, tools, LoadError, Plan};
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
        "{}, {}; dependencies: {}; prompts: {}",
        crate::text::count(plan.work_units.len(), "work unit"),
        crate::text::count(plan.total_sprints(), "sprint"),
        plan.dependency_structure.as_str(),
        plan.dispatch_mode.as_str(),
    );
    for u in &plan.work_units {
        let deps = crate::text::names_or(&u.depends_on, "—");
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
                    if let Some(want) = &c.expected {
                        let first = want.lines().next().unwrap_or("");
                        let more = if want.lines().count() > 1 { " …" } else { "" };
                        let _ =
                            writeln!(out, "  │         {:<10} output contains: {first}{more}", "");
                    }
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

/// Reads the plan for a command; `Err(1)` after saying why it cannot be read.
fn read(path: Option<&Path>, json: bool) -> anyhow::Result<Result<plan::LoadedPlan, i32>> {
    let cwd = std::env::current_dir()?;
    Ok(
        match plan::locate(path, &cwd).and_then(|p| plan::load(&p)) {
            Ok(l) => Ok(l),
            Err(LoadError::Plan(e)) if json => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "path": e.path, "problems": e.problems })
                    )?
                );
                Err(1)
            }
            Err(e) => {
                eprint!("{e}");
                if !e.to_string().ends_with('\n') {
                    eprintln!();
                }
                Err(1)
            }
        },
    )
}

/// `supervise plan show`: exit status 0 for a usable plan, 1 otherwise.
pub fn show(path: Option<&Path>, json: bool) -> anyhow::Result<i32> {
    let loaded = match read(path, json)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&loaded.plan)?);
    } else {
        print!("{}", render_tree(&loaded.plan));
    }
    // The process ends here: freeing a large plan piece by piece would only
    // keep the person waiting.
    std::mem::forget(loaded);
    Ok(0)
}

/// `supervise plan breakdown`: 0 when the plan is written (or printed), 1
/// when there is no document or a plan would be overwritten.
pub fn breakdown(
    doc: Option<&Path>,
    dry_run: bool,
    json: bool,
    force: bool,
    offline: bool,
    flags: &super::run_cmd::RunFlags,
) -> anyhow::Result<i32> {
    use tools::breakdown::{self as bd, DOCUMENTS};
    let path = match doc {
        Some(p) => p.to_path_buf(),
        None => match DOCUMENTS.iter().map(Path::new).find(|p| p.is_file()) {
            Some(p) => p.to_path_buf(),
            None => {
                eprintln!("ERROR: Cannot find a requirements document.\nThe breakdown command needs a source document to analyze ({} here).\nPlease provide the path: supervise plan breakdown path/to/requirements.md", DOCUMENTS.join(", "));
                return Ok(1);
            }
        },
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("ERROR: cannot read {}: {e}", path.display());
            return Ok(1);
        }
    };
    let root = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let project = std::fs::canonicalize(root)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
        .unwrap_or_else(|| "project".into());
    let out = root.join("EXECUTION_PLAN.md");
    // With an agent configured (and not --offline), an agent writes the plan
    // and the deterministic checks accept it; the heuristics otherwise.
    if !offline && !json && super::workflow_cmd::agent_configured(flags) {
        if out.exists() && !force && !dry_run {
            eprintln!(
                "ERROR: {} already exists; nothing was written.\nSee the new plan with --dry-run, or replace it with --force.",
                out.display()
            );
            return Ok(1);
        }
        let (code, made) = super::workflow_cmd::breakdown_with_agent(&text, flags)?;
        let Some(accepted) = made else {
            eprintln!("The agent's plan was not accepted (see .supervise/breakdown/SUPERVISOR_STATE.md for each attempt and what its checks found). Run the command again to go on, or use --offline for the heuristics' plan.");
            return Ok(code.max(1));
        };
        let (plan, attempts) = (accepted.text, accepted.attempts);
        if dry_run {
            print!("{plan}");
            return Ok(0);
        }
        std::fs::write(&out, &plan)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
        let coverage = bd::accept(&text, &plan, accepted.max_turns).unwrap_or_default();
        print!(
            "## Breakdown Complete\n\nSource: {}\nOutput: {}\n\nMade by an agent in {attempts} attempt(s), accepted by the deterministic checks (every requirement in a sprint, a machine check in every sprint, none over budget).\n\n### Coverage\n\n{}\nNext step: supervise plan prioritize\n",
            path.display(),
            out.display(),
            bd::coverage_table(&coverage)
        );
        return Ok(0);
    }
    let b = bd::breakdown(&text, &project);
    if json {
        println!("{}", serde_json::to_string_pretty(&b)?);
        return Ok(0);
    }
    if dry_run {
        print!("{}", b.plan);
        return Ok(0);
    }
    if out.exists() && !force {
        eprintln!(
            "ERROR: {} already exists; nothing was written.\nSee the new plan with --dry-run, or replace it with --force.",
            out.display()
        );
        return Ok(1);
    }
    std::fs::write(&out, &b.plan).map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
    print!(
        "{}",
        bd::summary(
            &b,
            &path.display().to_string(),
            &out.display().to_string(),
            "supervise plan prioritize"
        )
    );
    Ok(0)
}

/// `supervise plan analyze`: 0 without critical issues, 2 with, 1 when the plan
/// cannot be read.
pub fn analyze(path: Option<&Path>, flags: &super::PlanToolFlags) -> anyhow::Result<i32> {
    let loaded = match read(path, flags.json)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let a = tools::analyze::analyze(&loaded.plan, &loaded.source, flags.max_turns);
    let code = if a.critical() > 0 { 2 } else { 0 };
    if flags.json {
        println!("{}", serde_json::to_string_pretty(&a)?);
        return Ok(code);
    }
    let shown = loaded
        .path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let text = tools::analyze::report(&a, &shown, &chrono::Utc::now().to_rfc3339());
    let expected = expected_cost(&loaded);
    if flags.dry_run {
        print!("{text}\n{expected}\n");
        return Ok(code);
    }
    let out = loaded.root.join("ANALYSIS_REPORT.md");
    std::fs::write(&out, &text).map_err(|e| anyhow::anyhow!("writing {}: {e}", out.display()))?;
    println!(
        "## Analysis Complete\n\nReport: {}\n\n{}\n\n{expected}",
        out.display(),
        tools::analyze::summary(&a)
    );
    Ok(code)
}

/// What running the plan is likely to cost, under the settings a run of it
/// would read (`.github/supervise.yml` beside it or above, else defaults).
/// Settings that do not read leave the analysis whole, and say why.
fn expected_cost(loaded: &plan::LoadedPlan) -> String {
    let file =
        match crate::settings::find_file(&loaded.root).map(|p| crate::settings::read_file(&p)) {
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                return format!("Expected cost: not given, the settings do not read: {e:#}")
            }
            None => Default::default(),
        };
    let mut engine = crate::settings::Settings::merge(file, Default::default()).engine;
    use crate::place::local::supervisor;
    engine.cost_model = supervisor::cost_history(&supervisor::state_dir(loaded));
    let e = crate::engine::estimate::estimate(&loaded.plan, &engine);
    crate::report::estimate_line(&e, &engine)
}

/// `supervise plan evaluate`: the fixes of §17f written into the plan (a
/// unified diff with `--dry-run`), then the summary; exit status 0.
pub fn evaluate(
    path: Option<&Path>,
    flags: &super::PlanToolFlags,
    agent: Option<&super::run_cmd::RunFlags>,
) -> anyhow::Result<i32> {
    let loaded = match read(path, flags.json)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    // With an agent configured (and not --offline), the fixes are an
    // agent's, accepted by the evaluation's own checks.
    if let Some(run_flags) =
        agent.filter(|f| !flags.json && super::workflow_cmd::agent_configured(f))
    {
        let ev = tools::evaluate::evaluate(&loaded.plan, flags.max_turns);
        if ev.sprints.iter().all(|c| c.all_fixes().next().is_none()) {
            print!("{}", tools::evaluate::render(&ev));
            println!("\nNothing to fix: no agent was asked.");
            return Ok(0);
        }
        let (code, made) = super::workflow_cmd::evaluate_with_agent(
            &loaded.source,
            &tools::evaluate::render(&ev),
            run_flags,
        )?;
        let Some(accepted) = made else {
            eprintln!("The agent's fixes were not accepted (see .supervise/evaluate/SUPERVISOR_STATE.md for each attempt and what its checks found). Run the command again to go on, or use --offline for the heuristics' rewrite.");
            return Ok(code.max(1));
        };
        let attempts = crate::text::count(accepted.attempts as usize, "attempt");
        let rw = tools::rewrite::Rewrite {
            text: accepted.text,
            changes: vec![format!("fixed by an agent in {attempts}")],
            ..Default::default()
        };
        apply(&loaded, &rw, flags.dry_run)?;
        println!(
            "\nFixed by an agent in {attempts}, accepted by the evaluation's checks: every unit and task kept, no check moved to another unit, every sprint testable and within {} turns.",
            accepted.max_turns
        );
        return Ok(0);
    }
    let rw = tools::rewrite::evaluated(&loaded.plan, &loaded.source, flags.max_turns);
    if flags.json {
        let ev = tools::evaluate::evaluate(&loaded.plan, flags.max_turns);
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "evaluation": ev, "rewrite": rw }))?
        );
        return Ok(0);
    }
    let ev = tools::evaluate::evaluate(&loaded.plan, flags.max_turns);
    print!("{}", tools::evaluate::render(&ev));
    if rw.text == loaded.source && ev.sprints.iter().any(|c| !c.fixes.is_empty()) {
        // Listed as fixes, but this plan's shape does not let the rewrite
        // make them: say so rather than "nothing to change".
        println!(
            "The fixes above were not made: a sprint is split or merged only where its heading is `### Sprint N: …`, it is a code sprint, and its tasks and exit criteria are list items (`supervise plan show` shows how each line was read). Edit it so, or have an agent make them with `--agent`."
        );
    } else {
        apply(&loaded, &rw, flags.dry_run)?;
    }
    print!(
        "\n{}",
        tools::rewrite::evaluate_summary(&loaded.plan, &rw, flags.max_turns)
    );
    Ok(0)
}

/// `supervise plan prioritize`: the `**Priority**:` annotations and layer
/// adjustments of §16 written into the plan (a diff with `--dry-run`); exit 0.
pub fn prioritize(path: Option<&Path>, flags: &super::PlanToolFlags) -> anyhow::Result<i32> {
    let loaded = match read(path, flags.json)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let rw = tools::rewrite::prioritized(&loaded.plan, &loaded.source);
    if flags.json {
        let ps = tools::prioritize::prioritize(&loaded.plan);
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "priorities": ps, "rewrite": rw }))?
        );
        return Ok(0);
    }
    apply(&loaded, &rw, flags.dry_run)?;
    print!("{}", tools::rewrite::prioritize_summary(&loaded.plan, &rw));
    Ok(0)
}

/// Writes a rewrite over the plan — only if the reader reads it back, so a
/// rewrite can never leave a plan that cannot run — or prints its diff.
fn apply(
    loaded: &plan::LoadedPlan,
    rw: &tools::rewrite::Rewrite,
    dry_run: bool,
) -> anyhow::Result<()> {
    let name = loaded
        .path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| "EXECUTION_PLAN.md".into());
    if rw.text == loaded.source {
        println!("{name}: left as it is (no split or merge to make).");
        return Ok(());
    }
    if let Err(problems) = crate::plan::parse(&rw.text, &name) {
        anyhow::bail!(
            "the rewrite of {name} would not read back ({} problem(s), first: line {}: {}); nothing was written — please report this with the plan",
            problems.len(),
            problems.first().map_or(0, |p| p.line),
            problems.first().map_or(String::new(), |p| p.message.clone())
        );
    }
    if dry_run {
        let diff = similar::TextDiff::from_lines(&loaded.source, &rw.text);
        print!(
            "{}",
            diff.unified_diff()
                .context_radius(3)
                .header(&format!("a/{name}"), &format!("b/{name}"))
        );
        return Ok(());
    }
    std::fs::write(&loaded.path, &rw.text)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", loaded.path.display()))?;
    println!("{name}: rewritten ({} change(s)).", rw.changes.len());
    Ok(())
}
