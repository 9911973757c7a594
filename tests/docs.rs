//! The user guide (`docs/`, an mdBook) and the READMEs hold together: every
//! relative link leads to a file that exists and, with an anchor, to a
//! heading it has; the book's summary lists every chapter and only chapters
//! that exist. (Every `supervise` command they show is held to the parser
//! by `tests/readme.rs`.)

#[path = "support/documents.rs"]
mod documents;
mod support;

use documents::documents;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The backticks that open or close a fence on this line, if it is one.
fn fence_of(line: &str) -> Option<usize> {
    let n = line.trim_start().chars().take_while(|c| *c == '`').count();
    (n >= 3).then_some(n)
}

/// Each line with the fence it stands in (`None`: prose), a fence closing
/// only on at least as many backticks as opened it (a four-backtick block
/// may show three-backtick ones).
fn lines_in_fences(text: &str) -> Vec<(&str, Option<usize>)> {
    let mut open: Option<usize> = None;
    let mut out = Vec::new();
    for l in text.lines() {
        match (open, fence_of(l)) {
            (None, Some(n)) => {
                open = Some(n);
                out.push((l, Some(n)));
            }
            (Some(o), Some(n)) if n >= o && l.trim().trim_matches('`').is_empty() => {
                open = None;
                out.push((l, Some(o)));
            }
            (o, _) => out.push((l, o)),
        }
    }
    out
}

/// Text outside fenced code blocks, line by line.
fn prose(text: &str) -> Vec<&str> {
    lines_in_fences(text)
        .into_iter()
        .filter(|(_, f)| f.is_none())
        .map(|(l, _)| l)
        .collect()
}

/// Fenced blocks in order: (info string, body).
fn fenced_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, String)> = None;
    let mut open: Option<usize> = None;
    for l in text.lines() {
        match (open, fence_of(l)) {
            (None, Some(n)) => {
                open = Some(n);
                current = Some((l.trim().trim_start_matches('`').to_string(), String::new()));
            }
            (Some(o), Some(n)) if n >= o && l.trim().trim_matches('`').is_empty() => {
                open = None;
                blocks.extend(current.take());
            }
            (Some(_), _) => {
                if let Some((_, body)) = current.as_mut() {
                    body.push_str(l);
                    body.push('\n');
                }
            }
            (None, None) => {}
        }
    }
    blocks
}

/// A heading's anchor as GitHub and mdBook make it.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    prose(&text)
        .into_iter()
        .filter_map(|l| {
            let t = l.trim_start();
            let hashes = t.chars().take_while(|c| *c == '#').count();
            (hashes > 0 && t[hashes..].starts_with(' ')).then(|| slug(&t[hashes..]))
        })
        .collect()
}

/// `(text, target)` of every inline link outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        // Inline code may hold brackets that are not links.
        let line: String = line.split('`').step_by(2).collect::<Vec<_>>().join("");
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            out.push(after[..end].to_string());
            rest = &after[end.min(after.len())..];
        }
    }
    out
}

#[test]
fn every_relative_link_leads_to_a_file_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", doc.display()));
                continue;
            }
            if let Some(a) = anchor.filter(|_| path.extension().is_some_and(|x| x == "md")) {
                if !anchors(&path).contains(a) {
                    broken.push(format!("{}: {target} (no such heading)", doc.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_books_summary_lists_every_chapter_and_only_chapters_that_exist() {
    let summary = std::fs::read_to_string(root().join("docs/src/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let chapters: BTreeSet<String> = documents()
        .iter()
        .filter(|p| p.starts_with(root().join("docs/src")))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().to_string()))
        .filter(|n| n != "SUMMARY.md")
        .collect();
    assert_eq!(listed, chapters, "SUMMARY.md and docs/src/ differ");
}

/// The plan format chapter's examples are run: each plan shown is read by
/// `supervise plan show`, and what the chapter says it prints is what it
/// prints.
#[test]
fn the_plan_format_chapters_examples_print_what_the_chapter_shows() {
    let text = std::fs::read_to_string(root().join("docs/src/plan-format.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut plan: Option<String> = None;
    let mut ran = 0;
    let mut wrong = Vec::new();
    for (info, body) in fenced_blocks(&text) {
        if info == "markdown" {
            plan = Some(body);
            continue;
        }
        let Some(shown) = body.strip_prefix("$ supervise plan show\n") else {
            continue;
        };
        let source = plan
            .take()
            .expect("a `supervise plan show` block follows a plan");
        std::fs::write(dir.path().join("EXECUTION_PLAN.md"), &source).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"))
            .args(["plan", "show"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || printed != shown {
            wrong.push(format!(
                "the plan starting {:?}:\n--- the chapter shows\n{shown}--- it prints\n{printed}{}",
                source.lines().next().unwrap_or(""),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        ran += 1;
    }
    assert!(ran >= 5, "the chapter's examples were found ({ran})");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The guide's "Trying it without GitHub" works as written: its `curl`
/// lines, played against the fake GitHub and the real `supervise serve`,
/// take an operation from `/supervise start` to the final pull request.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trying_it_without_github_plays_an_operation() {
    let page = std::fs::read_to_string(root().join("docs/src/testing.md")).unwrap();
    let section = page
        .split("## Trying it without GitHub")
        .nth(1)
        .expect("the section");
    let block = section
        .split("```sh\n")
        .nth(3)
        .and_then(|b| b.split("\n```").next())
        .expect("the third shell block: the lines a person types");
    assert!(block.contains("/supervise start"), "{block}");
    let port = support::free_port();
    let fake = support::fake_github(Some(port), None).await;
    let tmp = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}/try.db?mode=rwc", tmp.path().display());
    let mut serve = support::spawn_serve(port, &fake.url(), &db, &[]);
    support::wait_listening(port).await;
    let out = std::process::Command::new("sh")
        .args(["-ec", block])
        .env("FAKE", fake.url())
        .env("REPO_ROOT", root())
        .env("SUPERVISE", env!("CARGO_BIN_EXE_supervise"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let finished = loop {
        let done = fake
            .pulls("acme/shop")
            .into_iter()
            .any(|p| p.base == "main" && p.head.ends_with("/integration"));
        if done || std::time::Instant::now() > deadline {
            break done;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let _ = serve.kill();
    let _ = serve.wait();
    assert!(
        finished,
        "no final pull request: {:#?}",
        fake.comments_in("acme/shop")
            .iter()
            .map(|c| c.body.clone())
            .collect::<Vec<_>>()
    );
}

/// The architecture page's import graph is the code's: the block between
/// its `import-graph` markers is what `scripts/import_graph.py` prints now
/// (modules by level, the counts, no cycle), so the page and the code
/// cannot drift apart.
#[test]
fn the_architecture_pages_import_graph_is_the_codes() {
    let page = std::fs::read_to_string(root().join("docs/src/architecture.md")).unwrap();
    let block = page
        .split("<!-- import-graph -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- /import-graph -->").next())
        .expect("the page's import-graph block");
    let shown = block
        .trim()
        .trim_start_matches("```text")
        .trim_end_matches("```")
        .trim();
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/import_graph.py"))
        .arg(root().join("src"))
        .output()
        .expect("python3 runs scripts/import_graph.py");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let measured = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        shown,
        measured.trim(),
        "docs/src/architecture.md: paste the output of `python3 scripts/import_graph.py src` between its import-graph markers"
    );
    assert!(measured.contains(" 0 cycle(s)"), "{measured}");
}

/// The App guide names every comment command: a word added to the table
/// and not to the guide fails here, with the line to write.
#[test]
fn every_command_is_in_the_app_guide() {
    let guide = std::fs::read_to_string(root().join("docs/src/github-app.md")).unwrap();
    for c in supervise::commands::COMMANDS {
        assert!(
            guide.contains(&format!("`{}", c.name)),
            "docs/src/github-app.md does not name `/supervise {}`: add it to \"Commands on the operation's issue\"",
            c.name
        );
    }
}

/// Every path CONTRIBUTING's recipes send a reader to is there: a recipe
/// that names a moved file would send the next person to the wrong place.
#[test]
fn the_contributing_recipes_name_files_that_exist() {
    let text = std::fs::read_to_string(root().join("CONTRIBUTING.md")).unwrap();
    let mut named = 0;
    for span in text.split('`').skip(1).step_by(2) {
        let path = span.split_whitespace().next().unwrap_or("");
        let looks_like_path = ["src/", "tests/", "docs/", "schema/", "scripts/"]
            .iter()
            .any(|p| path.starts_with(p))
            && !path.contains(['<', '*']);
        if looks_like_path {
            named += 1;
            assert!(
                root().join(path).exists(),
                "CONTRIBUTING.md names `{path}`, which is not in the tree"
            );
        }
    }
    assert!(
        named >= 10,
        "found only {named} paths; did the recipes' format change?"
    );
}

/// Every plan a reader may copy — under `examples/` and in the guide's
/// `markdown` blocks — names its criteria's paths from the project's root,
/// as they are checked; the rule's check finds the slip the Greeter plan
/// once had.
#[test]
fn every_plan_shown_names_criteria_paths_from_the_root() {
    use supervise::plan::tools::analyze::root_path_slips;
    let slips = |source: &str| -> Vec<String> {
        let Ok(plan) = supervise::plan::parse(source, "Shown") else {
            return Vec::new();
        };
        plan.work_units
            .iter()
            .flat_map(|u| u.sprints.iter().map(move |s| (u, s)))
            .flat_map(|(u, s)| root_path_slips(u, s))
            .map(|(line, path, meant)| format!("line {line}: `{path}` (meant `{meant}`)"))
            .collect()
    };
    let mut plans = vec![(
        "examples/greeter/EXECUTION_PLAN.md".to_string(),
        std::fs::read_to_string(root().join("examples/greeter/EXECUTION_PLAN.md")).unwrap(),
    )];
    let mut chapters: Vec<_> = std::fs::read_dir(root().join("docs/src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    chapters.push(root().join("README.md"));
    for chapter in chapters {
        let text = std::fs::read_to_string(&chapter).unwrap();
        for (i, (info, body)) in fenced_blocks(&text).into_iter().enumerate() {
            if info == "markdown" {
                plans.push((format!("{} block {}", chapter.display(), i + 1), body));
            }
        }
    }
    let wrong: Vec<String> = plans
        .iter()
        .flat_map(|(name, source)| {
            slips(source)
                .into_iter()
                .map(move |s| format!("{name}, {s}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let old = plans[0]
        .1
        .replace("`core/greeting.txt` exists", "`greeting.txt` exists")
        .replace(
            "grep -q formatter core/format.txt",
            "grep -q formatter format.txt",
        );
    let found = slips(&old);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].contains("`greeting.txt` (meant `core/greeting.txt`)"),
        "{found:?}"
    );
    assert!(
        found[1].contains("`format.txt` (meant `core/format.txt`)"),
        "{found:?}"
    );
}
