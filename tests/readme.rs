//! Every `supervise …` command the README shows is one the program accepts as
//! written (flags, arguments, order), and every agent command it shows would
//! get past the preflight where its program exists. Commands that need the
//! network (a real agent, GitHub) are only parsed, not run. The user
//! guide's chapters and the other READMEs are held to the same.

#[path = "support/documents.rs"]
mod documents;

use clap::Parser;
use supervise::cli::Cli;

/// Splits a shell command line into words, honouring single and double quotes
/// (enough for the README's examples; `$(…)` stays inside its quotes).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, c) if c.is_whitespace() => {
                if started || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            (None, c) => cur.push(c),
        }
    }
    if started || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Each document's name (from the project's top) and text.
fn texts() -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    documents::documents()
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The `supervise` command lines in the documents' shell blocks, comments
/// cut, with the document each is in.
fn readme_commands() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (name, text) in texts() {
        for line in shell_commands(&text) {
            out.push((name.clone(), line));
        }
    }
    out
}

fn shell_commands(readme: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line.starts_with("```sh");
            continue;
        }
        if !in_sh {
            continue;
        }
        // Environment assignments before the command, as in `A=1 supervise serve`.
        let cmd = line
            .split("  #")
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip_while(|w| w.contains('=') && !w.starts_with('-'))
            .collect::<Vec<_>>()
            .join(" ");
        if cmd.starts_with("supervise ") || cmd == "supervise" {
            out.push(line.split("  #").next().unwrap().trim().to_string());
        }
    }
    out
}

#[test]
fn every_command_the_readme_shows_is_accepted_as_written() {
    let commands = readme_commands();
    assert!(commands.len() >= 3, "found {commands:?}");
    // What `supervise setup` wrote to supervise.env, which the guide's
    // commands are run after sourcing.
    std::env::set_var("GITHUB_APP_ID", "1");
    for (doc, line) in commands {
        let all = words(&line);
        // `A=1 supervise …`: the assignments are the command's environment.
        for assignment in all.iter().take_while(|w| *w != "supervise") {
            if let Some((k, v)) = assignment.split_once('=') {
                std::env::set_var(k, v);
            }
        }
        let w: Vec<String> = all.into_iter().skip_while(|w| w != "supervise").collect();
        if let Err(e) = Cli::try_parse_from(&w) {
            panic!("{doc}: `{line}` is not accepted:\n{e}");
        }
    }
}

#[test]
fn the_shell_splitter_keeps_quoted_commands_whole() {
    assert_eq!(
        words(r#"supervise run --agent 'claude -p "$(cat "$F")"' --max-parallel 2"#),
        [
            "supervise",
            "run",
            "--agent",
            r#"claude -p "$(cat "$F")""#,
            "--max-parallel",
            "2"
        ]
    );
}

/// Every `supervise …` command a prompt tells an agent to run is one the
/// program accepts: a prompt naming a command that does not exist (once
/// `supervise plan <path>`) sends every planning agent into an error. The
/// prompts are built in the engine, so its sources are read for backticked
/// commands; `{placeholders}` stand for a path.
#[test]
fn commands_named_in_agent_prompts_parse() {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine"),
        &mut files,
    );
    let mut seen = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // Prompts are string literals: comments name commands to readers.
        let code = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for piece in code.split('`').skip(1).step_by(2) {
            let Some(rest) = piece.strip_prefix("supervise ") else {
                continue;
            };
            if rest.contains('\n') {
                continue;
            }
            let mut line = String::from("supervise ");
            let mut in_brace = false;
            for c in rest.chars() {
                match c {
                    '{' => {
                        in_brace = true;
                        line.push_str("PLAN.md");
                    }
                    '}' => in_brace = false,
                    c if !in_brace => line.push(c),
                    _ => {}
                }
            }
            seen += 1;
            if let Err(e) = Cli::try_parse_from(words(&line)) {
                panic!(
                    "{}: `{line}` is not a command the program accepts:\n{e}",
                    f.display()
                );
            }
        }
    }
    assert!(seen > 0, "the planning prompt names a command");
}

/// An agent finds the same variables on Actions as locally: the shipped
/// agent workflow sets every name of the contract (the Actions workflow once
/// lacked `SUPERVISE_SPRINT_NAME`, and the bundled toy agent died there);
/// the fake GitHub's runner runs that YAML itself.
#[test]
fn the_agent_workflow_sets_every_variable_of_the_contract() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let workflow =
        std::fs::read_to_string(root.join(".github/workflows/supervise-agent.yml")).unwrap();
    let yaml: serde_yaml::Value = serde_yaml::from_str(&workflow).unwrap();
    let env = &yaml["jobs"]["agent"]["env"];
    // Its first step sets those that name a path in the job's temporary
    // directory, for the steps after it.
    let first_step = yaml["jobs"]["agent"]["steps"][1]["run"]
        .as_str()
        .unwrap_or("");
    for name in supervise::contract::AGENT_VARIABLES {
        assert!(
            env.get(name).is_some() || first_step.contains(&format!("echo \"{name}=")),
            "the agent workflow's job does not set {name}"
        );
    }
}

#[path = "support/mod.rs"]
mod support;

/// The fenced block after `marker` in the README, and the one before it
/// of `info` (the README's example plan).
fn readme_block(after: &str, info: &str) -> String {
    let text =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let at = text
        .find(after)
        .unwrap_or_else(|| panic!("README has no {after:?}"));
    let open = format!("```{info}\n");
    let start = text[at..].find(&open).unwrap() + at + open.len();
    let end = text[start..].find("\n```").unwrap() + start;
    text[start..=end].to_string()
}

/// The README's example plan runs as it is, with the toy agent, to a
/// passed final verification; and its block that removes what the tool
/// left — branches, worktrees, `.supervise/`, reports, the exclude line —
/// leaves the repository as it was before the run.
#[test]
fn the_readmes_example_plan_runs_and_its_cleanup_leaves_nothing_behind() {
    let plan = readme_block("## A first run on your machine", "markdown");
    let repo = support::Checkout::new(
        &[("EXECUTION_PLAN.md", &plan)],
        "examples/agents/toy-agent.sh",
        "",
    );
    let out = repo.cmd(&["run"]).output().unwrap();
    let said = support::text(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("✓ Final head"), "{said}");
    let git = |args: &[&str]| support::git(&repo.root, args);
    assert!(
        !git(&["branch", "--list", "supervise/*"]).is_empty(),
        "the run left branches"
    );
    let exclude_before = std::fs::read_to_string(repo.root.join(".git/info/exclude")).unwrap();
    assert!(exclude_before.contains("/.supervise/"), "{exclude_before}");
    // The cleanup, as the README shows it.
    let cleanup = readme_block("<!-- cleanup:", "sh");
    let out = std::process::Command::new("sh")
        .args(["-ec", &cleanup])
        .current_dir(&repo.root)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", support::text(&out));
    assert_eq!(
        git(&["branch", "--list", "supervise/*"]).trim(),
        "",
        "branches removed"
    );
    assert_eq!(
        git(&["worktree", "list"]).lines().count(),
        1,
        "worktrees removed"
    );
    assert_eq!(
        git(&["status", "--porcelain", "--ignored"]).trim(),
        "",
        "nothing left in the checkout"
    );
    let exclude = std::fs::read_to_string(repo.root.join(".git/info/exclude")).unwrap();
    assert!(!exclude.contains("/.supervise/"), "{exclude}");
}
