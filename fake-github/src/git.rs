//! Real bare git repositories behind the fake's git, contents, compare and merge
//! endpoints, driven through the `git` command line with plumbing commands only
//! (no worktree), so concurrent requests never share a checkout.

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
        let sha = git(&repo.path, &["commit-tree", &tree, "-m", "Initial commit"])?;
        repo.update_ref(default_branch, &sha, None)?;
        Ok(repo)
    }

    pub fn resolve(&self, rev: &str) -> Option<String> {
        git(
            &self.path,
            &["rev-parse", "--verify", "-q", &format!("{rev}^{{commit}}")],
        )
        .ok()
    }

    pub fn branch_sha(&self, branch: &str) -> Option<String> {
        self.resolve(&format!("refs/heads/{branch}"))
    }

    /// Moves (or creates) a branch; with `old`, only if it still points there.
    pub fn update_ref(&self, branch: &str, new: &str, old: Option<&str>) -> Result<(), String> {
        let r = format!("refs/heads/{branch}");
        let mut args = vec!["update-ref", r.as_str(), new];
        if let Some(o) = old {
            args.push(o);
        }
        git(&self.path, &args).map(|_| ())
    }

    /// A tree: `base`'s tree with `files` written over it.
    fn tree_with(&self, base: Option<&str>, files: &[(&str, &str)]) -> Result<String, String> {
        let mut edits = Vec::new();
        for (path, content) in files {
            let blob = git_with(
                &self.path,
                &["hash-object", "-w", "--stdin"],
                Some(content.as_bytes()),
                &[],
            )?;
            edits.push((path.to_string(), "100644".to_string(), Some(blob)));
        }
        self.edit_tree(base, &edits)
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
        let tree = self.tree_with(Some(&parent), files)?;
        let sha = git(
            &self.path,
            &["commit-tree", &tree, "-p", &parent, "-m", message],
        )?;
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

    /// `base`'s tree with each (path, mode, sha) set, or removed where sha
    /// is None, as `POST /git/trees` makes it.
    pub fn edit_tree(
        &self,
        base: Option<&str>,
        edits: &[(String, String, Option<String>)],
    ) -> Result<String, String> {
        // A throw-away index of its own: concurrent requests share no state.
        let index = self.path.join(format!(
            "index-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let idx = index.display().to_string();
        let env = [("GIT_INDEX_FILE", idx.as_str())];
        let result = (|| {
            match base {
                Some(b) => git_with(&self.path, &["read-tree", b], None, &env)?,
                None => git_with(&self.path, &["read-tree", "--empty"], None, &env)?,
            };
            for (path, mode, sha) in edits {
                match sha {
                    Some(sha) => {
                        let info = format!("{mode},{sha},{path}");
                        git_with(
                            &self.path,
                            &["update-index", "--add", "--cacheinfo", &info],
                            None,
                            &env,
                        )?
                    }
                    // Mode 0 removes the path (`--force-remove` wants a work tree).
                    None => {
                        let line = format!("0 {}\t{path}\n", "0".repeat(40));
                        git_with(
                            &self.path,
                            &["update-index", "--index-info"],
                            Some(line.as_bytes()),
                            &env,
                        )?
                    }
                };
            }
            git_with(&self.path, &["write-tree"], None, &env)
        })();
        let _ = std::fs::remove_file(&index);
        result
    }

    /// A new commit of `tree` on `parents`.
    pub fn commit_tree(
        &self,
        tree: &str,
        parents: &[String],
        message: &str,
    ) -> Result<String, String> {
        let mut args = vec!["commit-tree", tree, "-m", message];
        for p in parents {
            args.extend(["-p", p.as_str()]);
        }
        git(&self.path, &args)
    }

    /// Whether `ancestor` is in `of`'s history (or is it).
    pub fn is_ancestor(&self, ancestor: &str, of: &str) -> bool {
        git(&self.path, &["merge-base", "--is-ancestor", ancestor, of]).is_ok()
    }

    /// A file's blob sha and text at `rev`, byte for byte as GitHub serves
    /// it (its trailing newline kept: `git` trims what it prints).
    pub fn file(&self, rev: &str, path: &str) -> Option<(String, String)> {
        let spec = format!("{rev}:{path}");
        let blob = git(&self.path, &["rev-parse", "--verify", "-q", &spec]).ok()?;
        let out = Command::new("git")
            .current_dir(&self.path)
            .args(["cat-file", "blob", &blob])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        Some((blob, String::from_utf8_lossy(&out.stdout).into_owned()))
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

    /// Commits reachable from `head` and not from `base`, oldest first.
    pub fn commits_between(&self, base: &str, head: &str) -> Result<Vec<Commit>, String> {
        let range = format!("{base}..{head}");
        let out = git(
            &self.path,
            &["log", "--reverse", "--format=%H%x00%s", &range],
        )?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('\0'))
            .map(|(sha, msg)| Commit {
                sha: sha.to_string(),
                message: msg.to_string(),
            })
            .collect())
    }

    /// Merges `head` into `base` without a worktree. `Err(Ok(msg))` is a conflict.
    pub fn merge(
        &self,
        base: &str,
        head: &str,
        message: &str,
    ) -> Result<String, Result<String, String>> {
        let base_sha = self
            .branch_sha(base)
            .ok_or_else(|| Err(format!("no branch {base}")))?;
        let head_sha = self
            .branch_sha(head)
            .ok_or_else(|| Err(format!("no branch {head}")))?;
        if git(
            &self.path,
            &["merge-base", "--is-ancestor", &head_sha, &base_sha],
        )
        .is_ok()
        {
            return Ok(base_sha);
        }
        let tree = match git(
            &self.path,
            &["merge-tree", "--write-tree", &base_sha, &head_sha],
        ) {
            Ok(out) => out.lines().next().unwrap_or("").to_string(),
            Err(e) => return Err(Ok(e)),
        };
        let sha = git(
            &self.path,
            &[
                "commit-tree",
                &tree,
                "-p",
                &base_sha,
                "-p",
                &head_sha,
                "-m",
                message,
            ],
        )
        .map_err(Err)?;
        self.update_ref(base, &sha, Some(&base_sha)).map_err(Err)?;
        Ok(sha)
    }

    pub fn mergeable(&self, base: &str, head: &str) -> Option<bool> {
        let b = self.branch_sha(base)?;
        let h = self.branch_sha(head)?;
        Some(git(&self.path, &["merge-tree", "--write-tree", &b, &h]).is_ok())
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
