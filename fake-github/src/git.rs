//! Real bare git repositories behind the fake's git, contents, compare and merge
//! endpoints, with no worktree, so concurrent requests never share a checkout.
//! What every request does (resolving a ref, reading a file, writing a tree, a
//! commit, a ref, a merge) goes through libgit2 in-process; the rest (diffs,
//! tree listings, clones) through the `git` command line's plumbing. A process per
//! ref lookup made the fake, not the service, what a benchmark of thousands
//! of runs measured.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const BOT: (&str, &str) = ("supervise[bot]", "bot@fake.github");

/// Runs git in `dir` and returns its standard output, or its error text.
pub fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    git_with(dir, args, None, &[])
}

pub fn git_with(
    dir: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> Result<String, String> {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", BOT.0)
        .env("GIT_AUTHOR_EMAIL", BOT.1)
        .env("GIT_COMMITTER_NAME", BOT.0)
        .env("GIT_COMMITTER_EMAIL", BOT.1)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().map_err(|e| format!("git: {e}"))?;
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(data).map_err(|e| e.to_string())?;
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
    } else {
        Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One bare repository.
#[derive(Debug, Clone)]
pub struct Repo {
    pub path: PathBuf,
    pub default_branch: String,
}

/// [`Repo::resolve`] in a repository already open: what one request resolves
/// several times opens it once.
fn commit_id(repo: &git2::Repository, rev: &str) -> Option<git2::Oid> {
    if rev.is_empty() || rev.starts_with('-') {
        return None;
    }
    Some(repo.revparse_single(rev).ok()?.peel_to_commit().ok()?.id())
}

pub struct Commit {
    pub sha: String,
    pub message: String,
}

impl Repo {
    /// A new bare repository with one commit holding `files` on the default branch.
    pub fn create(
        path: PathBuf,
        default_branch: &str,
        files: &[(&str, &str)],
    ) -> Result<Repo, String> {
        std::fs::create_dir_all(&path).map_err(|e| e.to_string())?;
        git(&path, &["init", "-q", "--bare", "-b", default_branch])?;
        let repo = Repo {
            path,
            default_branch: default_branch.to_string(),
        };
        let tree = repo.tree_with(None, files)?;
        let sha = repo.commit_tree(&tree, &[], "Initial commit")?;
        repo.update_ref(default_branch, &sha, None)?;
        Ok(repo)
    }

    /// The repository through libgit2 (opened anew each time: cheap, and it
    /// sees what `git` processes wrote meanwhile).
    fn open(&self) -> Result<git2::Repository, String> {
        git2::Repository::open_bare(&self.path).map_err(|e| e.message().to_string())
    }

    /// The commit a revision names (a full or short sha, a ref), as
    /// `git rev-parse --verify "<rev>^{commit}"` finds it.
    pub fn resolve(&self, rev: &str) -> Option<String> {
        commit_id(&self.open().ok()?, rev).map(|id| id.to_string())
    }

    /// A commit's id, subject and parents' ids.
    pub fn commit(&self, rev: &str) -> Option<(String, String, Vec<String>)> {
        let repo = self.open().ok()?;
        let c = repo.find_commit(commit_id(&repo, rev)?).ok()?;
        let subject = String::from_utf8_lossy(c.summary_bytes().unwrap_or_default()).into_owned();
        Some((
            c.id().to_string(),
            subject,
            c.parent_ids().map(|p| p.to_string()).collect(),
        ))
    }

    pub fn branch_sha(&self, branch: &str) -> Option<String> {
        self.resolve(&format!("refs/heads/{branch}"))
    }

    /// Moves (or creates) a branch; with `old`, only if it still points there.
    pub fn update_ref(&self, branch: &str, new: &str, old: Option<&str>) -> Result<(), String> {
        let repo = self.open()?;
        let name = format!("refs/heads/{branch}");
        let oid = |s: &str| git2::Oid::from_str(s).map_err(|e| e.message().to_string());
        let new = oid(new)?;
        repo.find_commit(new).map_err(|e| e.message().to_string())?;
        let moved = match old {
            Some(o) => repo.reference_matching(&name, new, true, oid(o)?, "fake-github"),
            None => repo.reference(&name, new, true, "fake-github"),
        };
        moved
            .map(|_| ())
            .map_err(|e| format!("update-ref {name}: {}", e.message()))
    }

    /// A tree: `base`'s tree with `files` written over it.
    fn tree_with(&self, base: Option<&str>, files: &[(&str, &str)]) -> Result<String, String> {
        let repo = self.open()?;
        let mut edits = Vec::new();
        for (path, content) in files {
            let blob = repo
                .blob(content.as_bytes())
                .map_err(|e| e.message().to_string())?;
            edits.push((
                path.to_string(),
                "100644".to_string(),
                Some(blob.to_string()),
            ));
        }
        self.edit_tree(base, &edits)
    }

    /// A commit of `files` written over `parent`'s tree, on top of it; no
    /// branch moves.
    pub fn commit_on(
        &self,
        parent: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> Result<String, String> {
        let tree = self.tree_with(Some(parent), files)?;
        self.commit_tree(&tree, &[parent.to_string()], message)
    }

    /// Commits `files` on top of `branch` and moves it (compare-and-swap).
    pub fn commit_files(
        &self,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> Result<String, String> {
        let parent = self
            .branch_sha(branch)
            .ok_or_else(|| format!("no branch {branch}"))?;
        let sha = self.commit_on(&parent, files, message)?;
        self.update_ref(branch, &sha, Some(&parent))?;
        Ok(sha)
    }

    /// A tree (of a commit, a branch or a tree sha): its sha and entries as
    /// (mode, type, sha, path), all the way down when `recursive`.
    pub fn tree(&self, rev: &str, recursive: bool) -> Option<(String, Vec<[String; 4]>)> {
        let sha = git(
            &self.path,
            &["rev-parse", "--verify", "-q", &format!("{rev}^{{tree}}")],
        )
        .ok()?;
        let mut args = vec!["ls-tree", "--full-tree"];
        if recursive {
            args.extend(["-r", "-t"]);
        }
        args.push(&sha);
        let out = git(&self.path, &args).ok()?;
        let entries = out
            .lines()
            .filter_map(|l| {
                let (meta, path) = l.split_once('\t')?;
                let mut m = meta.split(' ');
                Some([
                    m.next()?.to_string(),
                    m.next()?.to_string(),
                    m.next()?.to_string(),
                    path.to_string(),
                ])
            })
            .collect();
        Some((sha, entries))
    }

    /// `base`'s tree (of a commit or a tree) with each (path, mode, sha)
    /// set, or removed where sha is None, as `POST /git/trees` makes it.
    pub fn edit_tree(
        &self,
        base: Option<&str>,
        edits: &[(String, String, Option<String>)],
    ) -> Result<String, String> {
        let repo = self.open()?;
        let err = |e: git2::Error| e.message().to_string();
        let base = match base {
            Some(b) => repo
                .revparse_single(b)
                .and_then(|o| o.peel_to_tree())
                .map_err(|e| format!("{b}: {}", e.message()))?,
            None => {
                let empty = repo
                    .treebuilder(None)
                    .and_then(|t| t.write())
                    .map_err(err)?;
                repo.find_tree(empty).map_err(err)?
            }
        };
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, mode, sha) in edits {
            match sha {
                Some(sha) => {
                    let mode = match mode.as_str() {
                        "100755" => git2::FileMode::BlobExecutable,
                        "120000" => git2::FileMode::Link,
                        "160000" => git2::FileMode::Commit,
                        "040000" => git2::FileMode::Tree,
                        _ => git2::FileMode::Blob,
                    };
                    let id = git2::Oid::from_str(sha).map_err(err)?;
                    update.upsert(path.as_str(), id, mode);
                }
                None => {
                    update.remove(path.as_str());
                }
            }
        }
        let tree = update.create_updated(&repo, &base).map_err(err)?;
        Ok(tree.to_string())
    }

    /// A new commit of `tree` on `parents`, by the fake's bot, its message
    /// ending in a newline as `git commit-tree -m` leaves it.
    pub fn commit_tree(
        &self,
        tree: &str,
        parents: &[String],
        message: &str,
    ) -> Result<String, String> {
        let repo = self.open()?;
        let err = |e: git2::Error| e.message().to_string();
        let tree = repo
            .find_tree(git2::Oid::from_str(tree).map_err(err)?)
            .map_err(err)?;
        let parents = parents
            .iter()
            .map(|p| {
                git2::Oid::from_str(p)
                    .and_then(|id| repo.find_commit(id))
                    .map_err(|e| format!("{p}: {}", e.message()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let parents: Vec<&git2::Commit> = parents.iter().collect();
        let sig = git2::Signature::now(BOT.0, BOT.1).map_err(err)?;
        let message = if message.ends_with('\n') {
            message.to_string()
        } else {
            format!("{message}\n")
        };
        repo.commit(None, &sig, &sig, &message, &tree, &parents)
            .map(|id| id.to_string())
            .map_err(err)
    }

    /// Whether `ancestor` is in `of`'s history (or is it).
    pub fn is_ancestor(&self, ancestor: &str, of: &str) -> bool {
        let Ok(repo) = self.open() else { return false };
        match (commit_id(&repo, ancestor), commit_id(&repo, of)) {
            (Some(a), Some(o)) => a == o || repo.graph_descendant_of(o, a).unwrap_or(false),
            _ => false,
        }
    }

    /// A file's blob sha and text at `rev`, byte for byte as GitHub serves
    /// it.
    pub fn file(&self, rev: &str, path: &str) -> Option<(String, String)> {
        let repo = self.open().ok()?;
        let tree = repo.find_commit(commit_id(&repo, rev)?).ok()?.tree().ok()?;
        let entry = tree
            .get_path(Path::new(path.trim_start_matches('/')))
            .ok()?;
        let blob = repo.find_blob(entry.id()).ok()?;
        Some((
            entry.id().to_string(),
            String::from_utf8_lossy(blob.content()).into_owned(),
        ))
    }

    /// Files `head` changed since it left `base` (three-dot), with git's status
    /// letter (`A`, `M`, `D`, …).
    pub fn changed_files(&self, base: &str, head: &str) -> Result<Vec<(char, String)>, String> {
        let range = format!("{base}...{head}");
        let out = git(
            &self.path,
            &["diff", "--name-status", "--no-renames", &range],
        )?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(st, path)| (st.chars().next().unwrap_or('M'), path.to_string()))
            .collect())
    }

    /// The hunk of `git diff base...head -- path` that holds line `line` of
    /// the new file (the last hunk before it, else the first): what GitHub
    /// sends as a review comment's `diff_hunk`, cut at that line.
    pub fn diff_hunk(&self, base: &str, head: &str, path: &str, line: u32) -> String {
        let range = format!("{base}...{head}");
        let Ok(out) = git(&self.path, &["diff", "--no-renames", &range, "--", path]) else {
            return String::new();
        };
        let mut hunks: Vec<(u32, Vec<&str>)> = Vec::new();
        for l in out.lines() {
            if let Some(rest) = l.strip_prefix("@@ ") {
                // `@@ -a,b +c,d @@`: the new side starts at line c.
                let start = rest
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix('+'))
                    .and_then(|w| w.split(',').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(1);
                hunks.push((start, vec![l]));
            } else if let Some((_, h)) = hunks.last_mut() {
                h.push(l);
            }
        }
        let Some((start, lines)) = hunks
            .iter()
            .rev()
            .find(|(start, _)| *start <= line)
            .or(hunks.first())
        else {
            return String::new();
        };
        // Up to the commented line on the new side, as GitHub cuts it.
        let mut new_line = start.saturating_sub(1);
        let mut kept = Vec::new();
        for l in lines {
            kept.push(*l);
            if !l.starts_with("@@") && !l.starts_with('-') {
                new_line += 1;
                if new_line >= line {
                    break;
                }
            }
        }
        kept.join("\n")
    }

    /// Commits reachable from `head` and not from `base`, oldest first (by
    /// commit time, as `git log --reverse` lists them), with their subjects.
    pub fn commits_between(&self, base: &str, head: &str) -> Result<Vec<Commit>, String> {
        let repo = self.open()?;
        let resolve =
            |rev: &str| commit_id(&repo, rev).ok_or_else(|| format!("unknown revision {rev}"));
        let (base, head) = (resolve(base)?, resolve(head)?);
        let err = |e: git2::Error| e.message().to_string();
        let mut walk = repo.revwalk().map_err(err)?;
        walk.set_sorting(git2::Sort::TIME).map_err(err)?;
        walk.push(head).map_err(err)?;
        walk.hide(base).map_err(err)?;
        let mut out = Vec::new();
        for id in walk {
            let commit = repo.find_commit(id.map_err(err)?).map_err(err)?;
            out.push(Commit {
                sha: commit.id().to_string(),
                message: String::from_utf8_lossy(commit.summary_bytes().unwrap_or_default())
                    .into_owned(),
            });
        }
        out.reverse();
        Ok(out)
    }

    /// The tree of `head` merged into `base` (commits), or why not:
    /// `Err(Ok(msg))` is a conflict.
    fn merge_tree(
        repo: &git2::Repository,
        base: git2::Oid,
        head: git2::Oid,
    ) -> Result<String, Result<String, String>> {
        let err = |e: git2::Error| Err(e.message().to_string());
        let ours = repo.find_commit(base).map_err(err)?;
        let theirs = repo.find_commit(head).map_err(err)?;
        let mut index = repo.merge_commits(&ours, &theirs, None).map_err(err)?;
        if index.has_conflicts() {
            let paths: Vec<String> = index
                .conflicts()
                .map_err(err)?
                .filter_map(|c| c.ok())
                .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                .collect();
            return Err(Ok(format!("CONFLICT (content): {}", paths.join(", "))));
        }
        index
            .write_tree_to(repo)
            .map(|t| t.to_string())
            .map_err(err)
    }

    /// The heads of branches `base` and `head`, in a repository already open.
    fn heads_of(
        repo: &git2::Repository,
        base: &str,
        head: &str,
    ) -> Result<(git2::Oid, git2::Oid), String> {
        let head_of = |b: &str| {
            commit_id(repo, &format!("refs/heads/{b}")).ok_or_else(|| format!("no branch {b}"))
        };
        Ok((head_of(base)?, head_of(head)?))
    }

    /// Merges `head` into `base` without a worktree. `Err(Ok(msg))` is a conflict.
    pub fn merge(
        &self,
        base: &str,
        head: &str,
        message: &str,
    ) -> Result<String, Result<String, String>> {
        let repo = self.open().map_err(Err)?;
        let (base_id, head_id) = Self::heads_of(&repo, base, head).map_err(Err)?;
        let base_sha = base_id.to_string();
        if base_id == head_id || repo.graph_descendant_of(base_id, head_id).unwrap_or(false) {
            return Ok(base_sha);
        }
        let tree = Self::merge_tree(&repo, base_id, head_id)?;
        let sha = self
            .commit_tree(&tree, &[base_sha.clone(), head_id.to_string()], message)
            .map_err(Err)?;
        self.update_ref(base, &sha, Some(&base_sha)).map_err(Err)?;
        Ok(sha)
    }

    pub fn mergeable(&self, base: &str, head: &str) -> Option<bool> {
        let repo = self.open().ok()?;
        let (b, h) = Self::heads_of(&repo, base, head).ok()?;
        match Self::merge_tree(&repo, b, h) {
            Ok(_) => Some(true),
            Err(Ok(_)) => Some(false),
            Err(Err(_)) => None,
        }
    }

    /// Every branch and its head.
    pub fn branches(&self) -> Vec<(String, String)> {
        git(
            &self.path,
            &[
                "for-each-ref",
                "--format=%(refname:short) %(objectname)",
                "refs/heads",
            ],
        )
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(b, s)| (b.to_string(), s.to_string()))
        .collect()
    }

    /// A throw-away checkout of `rev` for a workflow or CI run.
    pub fn checkout(&self, rev: &str, into: &Path) -> Result<(), String> {
        let parent = into.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        let src = self.path.display().to_string();
        let dst = into.display().to_string();
        // Through git's transport, not a copy of the object directory: a
        // push landing meanwhile has a quarantine directory there that a
        // copying clone can see appear and vanish under it.
        git(
            parent,
            &["clone", "-q", "--no-local", "--no-checkout", &src, &dst],
        )?;
        git(into, &["checkout", "-q", rev])?;
        for (k, v) in [("user.name", BOT.0), ("user.email", BOT.1)] {
            git(into, &["config", k, v])?;
        }
        Ok(())
    }
}
