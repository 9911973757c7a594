//! The plan reader: finds an `EXECUTION_PLAN.md`, reads it with a real Markdown
//! parser and produces the plain [`Plan`] model with the line of every element.
//!
//! Reading is pure ([`parse`]); [`load`] adds the two pieces of I/O the reader
//! is allowed: reading the plan file and checking which referenced files exist.

mod blocks;
mod detect;
pub mod diff;
pub mod frontmatter;
mod model;
mod parallel;
pub mod template;
pub mod tools;

pub use model::*;

use std::fmt;
use std::path::{Path, PathBuf};

/// A plan that cannot be run, with every problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    pub path: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        writeln!(
            f,
            "{} cannot be run ({n} problem{}):",
            self.path.display(),
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "  {}:{}: {}", self.path.display(), p.line, p.message)?;
            if let Some(h) = &p.hint {
                write!(f, "\n      hint: {h}")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for PlanError {}

/// Errors of finding or loading a plan.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("ERROR: Cannot find EXECUTION_PLAN.md.\nThe Sprint Supervisor requires an execution plan to operate.\nPlease provide the path: supervise start /path/to/EXECUTION_PLAN.md\n(looked in {searched} and every directory above it)")]
    NotFound { searched: String },
    /// A path the person gave that holds no plan.
    #[error("ERROR: Cannot find the plan {given}: {why}.\nCheck the path, or run from the plan's directory without one (EXECUTION_PLAN.md is looked for there and above).")]
    NotAt { given: String, why: &'static str },
    #[error("ERROR: Cannot find a requirements document.\nThe breakdown command needs a source document to analyze.\nPlease provide the path: supervise breakdown /path/to/requirements.md")]
    NoRequirements,
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not UTF-8 text (first bad byte at line {line}); save it as UTF-8")]
    NotUtf8 { path: PathBuf, line: usize },
    #[error(transparent)]
    Plan(#[from] PlanError),
}

/// Reads plan text. `fallback_name` names a single-unit plan that has no `# Title`
/// (the specification uses the project directory's name).
pub fn parse(source: &str, fallback_name: &str) -> Result<Plan, Vec<Problem>> {
    let doc = blocks::parse(source);
    detect::read(&doc, fallback_name)
}

/// A located plan: the model plus where it lives.
#[derive(Debug, Clone)]
pub struct LoadedPlan {
    pub plan: Plan,
    pub path: PathBuf,
    /// The directory holding the plan; every other path is relative to it.
    pub root: PathBuf,
    pub source: String,
}

/// Reads the plan at `path` and checks which referenced files exist.
pub fn load(path: &Path) -> Result<LoadedPlan, LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let source = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let line = e.as_bytes()[..valid]
            .iter()
            .filter(|b| **b == b'\n')
            .count()
            + 1;
        LoadError::NotUtf8 {
            path: path.to_path_buf(),
            line,
        }
    })?;
    let root = path
        .parent()
        .map(Path::to_path_buf)
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("."));
    let fallback = std::fs::canonicalize(&root)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "project".to_string());
    let mut plan = parse(&source, &fallback).map_err(|problems| PlanError {
        path: path.to_path_buf(),
        problems,
    })?;
    for f in &mut plan.referenced_files {
        f.exists = root.join(&f.path).exists();
    }
    Ok(LoadedPlan {
        plan,
        path: path.to_path_buf(),
        root,
        source,
    })
}

/// §2 plan resolution: an explicit path, else `EXECUTION_PLAN.md` here, else up the tree.
pub fn locate(explicit: Option<&Path>, cwd: &Path) -> Result<PathBuf, LoadError> {
    if let Some(p) = explicit {
        let p = if p.is_dir() {
            p.join("EXECUTION_PLAN.md")
        } else {
            p.to_path_buf()
        };
        return if p.is_file() {
            Ok(p)
        } else {
            Err(LoadError::NotAt {
                given: p.display().to_string(),
                why: if p.exists() {
                    "it is not a file"
                } else {
                    "there is no such file"
                },
            })
        };
    }
    cwd.ancestors()
        .map(|d| d.join("EXECUTION_PLAN.md"))
        .find(|p| p.is_file())
        .ok_or_else(|| LoadError::NotFound {
            searched: cwd.display().to_string(),
        })
}

/// §2 requirements lookup for `breakdown`: an explicit path, else the first of
/// `REQUIREMENTS.md`, `PRD.md`, `SPEC.md`, `README.md` in `cwd`.
pub fn locate_requirements(explicit: Option<&Path>, cwd: &Path) -> Result<PathBuf, LoadError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(LoadError::NoRequirements)
        };
    }
    ["REQUIREMENTS.md", "PRD.md", "SPEC.md", "README.md"]
        .iter()
        .map(|n| cwd.join(n))
        .find(|p| p.is_file())
        .ok_or(LoadError::NoRequirements)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_walks_up_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("EXECUTION_PLAN.md"), "# P\n").unwrap();
        let deep = dir.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(
            locate(None, &deep).unwrap(),
            dir.path().join("EXECUTION_PLAN.md")
        );
        let other = tempfile::tempdir().unwrap();
        let err = locate(None, other.path()).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("ERROR: Cannot find EXECUTION_PLAN.md."));
    }

    #[test]
    fn requirements_lookup_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("README.md"), "x").unwrap();
        std::fs::write(dir.path().join("PRD.md"), "x").unwrap();
        assert_eq!(
            locate_requirements(None, dir.path()).unwrap(),
            dir.path().join("PRD.md")
        );
    }
}
