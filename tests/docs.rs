//! The user guide (`docs/`, an mdBook) and the READMEs hold together: every
//! relative link leads to a file that exists and, with an anchor, to a
//! heading it has; the book's summary lists every chapter and only chapters
//! that exist. (Every `supervise` command they show is held to the parser
//! by `tests/readme.rs`.)

#[path = "support/documents.rs"]
mod documents;

use documents::documents;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Text outside fenced code blocks, line by line.
fn prose(text: &str) -> Vec<&str> {
    let mut fence = false;
    text.lines()
        .filter(|l| {
            if l.trim_start().starts_with("```") {
                fence = !fence;
                return false;
            }
            !fence
        })
        .collect()
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
