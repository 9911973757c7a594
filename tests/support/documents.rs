//! The documents people read — the READMEs and the user guide's chapters —
//! for the tests that hold them to the program and to each other.

use std::path::{Path, PathBuf};

/// Their paths, the READMEs first, then the chapters in name order.
pub fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "deploy/README.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(root.join("docs/src"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    chapters.sort();
    out.extend(chapters);
    out
}
