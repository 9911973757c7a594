//! Git for local runs: the operation's integration branch, a branch per sprint
//! and a worktree per unit (its sprints run one after another, each moving the
//! unit's worktree on to its own branch), the evidence the cascade needs, and
//! merges into the integration branch.
//! Only refs and worktrees under `.supervise/` are touched: the person's own
//! checkout and branch never change.

use crate::contract::integration_branch;
use anyhow::{anyhow, Context, Result};
use git2::{BranchType, Oid, Repository, ResetType, Signature, StatusOptions, WorktreeAddOptions};
use std::path::{Path, PathBuf};

pub struct Git {
    repo: Repository,
    /// The plan's directory relative to the repository's working directory.
    plan_rel: PathBuf,
    worktrees: PathBuf,
}

/// What git says about a sprint branch after an agent ran.
#[derive(Debug, Default, Clone)]
pub struct BranchEvidence {
    pub commits: Vec<String>,
    pub uncommitted: Vec<String>,
    pub merge_conflict: Option<String>,
}

fn signature(repo: &Repository) -> Signature<'static> {
    repo.signature()
        .map(|s| s.to_owned())
        .or_else(|_| Signature::now("Sprint Supervisor", "supervise@localhost"))
        .expect("a fixed signature is valid")
}

/// The file in a worktree's git directory naming the sprint branch the
/// worktree was last given (see [`enter_branch`]).
const GIVEN_TO: &str = "supervise-branch";

/// Records, durably, that the worktree whose git directory is `git_dir` is
/// `branch`'s now: an attempt's uncommitted work must never be taken for a
/// sprint before it (which [`enter_branch`] would clear away).
fn record_given(git_dir: &Path, branch: &str) -> Result<()> {
    let path = git_dir.join(GIVEN_TO);
    let mut f =
        std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
    std::io::Write::write_all(&mut f, branch.as_bytes())?;
    f.sync_all()
        .with_context(|| format!("writing {}", path.display()))
}

/// How a worktree came to be on the attempt's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entered {
    /// It was there.
    Already,
    /// An earlier attempt of the sprint left it on another branch (`git
    /// checkout -b …`), and it is back.
    Returned,
    /// As `Returned`, but the way back would overwrite uncommitted work: it
    /// stays where the earlier attempt left it (git's reason).
    Stayed(String),
    /// It held the unit's sprint before, and moved on to this one.
    Moved,
}

/// Puts the worktree at `checkout` on `branch` for an attempt. Hold the
/// worktree's lock: nothing else may run in it meanwhile.
///
/// The worktree's record says which sprint it was last given. Given to this
/// one, every attempt starts on the sprint's branch: one an earlier attempt
/// left elsewhere is put back with a safe checkout, so uncommitted work is
/// never overwritten. Given to the unit's sprint before (merged by now), it
/// moves on, forced: every file the new branch does not hold goes, ignored
/// ones too, so the worktree is what a fresh checkout would be while only
/// the files that differ are written. A move cut off by a crash is made
/// again: the record changes only once it is complete.
pub fn enter_branch(checkout: &Path, branch: &str) -> Result<Entered> {
    let repo = Repository::discover(checkout)
        .with_context(|| format!("opening the worktree at {}", checkout.display()))?;
    let refname = format!("refs/heads/{branch}");
    let given = std::fs::read_to_string(repo.path().join(GIVEN_TO)).unwrap_or_default();
    let commit =
        || -> Result<git2::Commit<'_>> { Ok(repo.find_reference(&refname)?.peel_to_commit()?) };
    // Another sprint's: the one before. (No record at all: a worktree an
    // earlier version made for this very sprint, one per sprint.)
    if !given.is_empty() && given != branch {
        let mut fresh = git2::build::CheckoutBuilder::new();
        fresh.force().remove_untracked(true).remove_ignored(true);
        repo.checkout_tree(commit()?.as_object(), Some(&mut fresh))
            .with_context(|| {
                format!(
                    "moving the worktree at {} on to {branch}",
                    checkout.display()
                )
            })?;
        repo.set_head(&refname)?;
        record_given(repo.path(), branch)?;
        return Ok(Entered::Moved);
    }
    let on_branch = repo
        .head()
        .ok()
        .is_some_and(|h| h.name().ok() == Some(refname.as_str()));
    if on_branch {
        return Ok(Entered::Already);
    }
    let back = repo.checkout_tree(
        commit()?.as_object(),
        Some(git2::build::CheckoutBuilder::new().safe()),
    );
    if let Err(e) = back {
        return Ok(Entered::Stayed(e.message().to_string()));
    }
    repo.set_head(&refname)?;
    Ok(Entered::Returned)
}

/// Serialises what supervisors sharing one repository (two plans) write in common:
/// `.git/info/exclude` and the worktree records under `.git/worktrees`. Blocks
/// until the other supervisor is done; released when the file drops.
fn lock_repository(common_dir: &Path) -> Result<std::fs::File> {
    let path = common_dir.join("supervise.lock");
    let f = super::lockfile::open(&path).with_context(|| format!("opening {}", path.display()))?;
    super::lockfile::lock(&f).with_context(|| format!("locking {}", path.display()))?;
    Ok(f)
}

/// Everything a run needs of the repository, checked before anything is
/// created: a git repository with a commit, and the plan committed as it is on
/// disk (agents work from the committed plan). The error is the person's to act on.
pub fn check_checkout(plan_path: &Path, shown_as: &str) -> std::result::Result<(), String> {
    let dir = plan_path.parent().unwrap_or(Path::new("."));
    let Ok(repo) = Repository::discover(dir) else {
        return Err(format!(
            "{} is not inside a git repository. The supervisor keeps every sprint on its own branch, so it needs one:\n  git init && git add {shown_as} && git commit -m 'Add the plan'",
            dir.display()
        ));
    };
    if repo
        .head()
        .ok()
        .and_then(|h| h.peel_to_commit().ok())
        .is_none()
    {
        return Err(format!(
            "The repository has no commits yet. Commit the plan first:\n  git add {shown_as} && git commit -m 'Add the plan'"
        ));
    }
    let (Some(workdir), Ok(abs)) = (repo.workdir(), plan_path.canonicalize()) else {
        return Ok(());
    };
    let workdir = workdir.canonicalize().unwrap_or(workdir.to_path_buf());
    if let Ok(rel) = abs.strip_prefix(&workdir) {
        if repo
            .status_file(rel)
            .is_ok_and(|st| !st.is_empty() && !st.contains(git2::Status::IGNORED))
        {
            return Err(format!(
                "{shown_as} has uncommitted changes, and agents work from the committed plan. Commit it first:\n  git add {shown_as} && git commit -m 'Update the plan'\nthen run this command again. Nothing was started."
            ));
        }
    }
    Ok(())
}

impl Git {
    fn lock(&self) -> Result<std::fs::File> {
        lock_repository(self.repo.commondir())
    }

    /// Opens the repository holding `plan_root`; worktrees go to `state_dir/worktrees`.
    pub fn open(plan_root: &Path, state_dir: &Path) -> Result<Git> {
        let repo = Repository::discover(plan_root).with_context(|| {
            format!(
                "{} is not inside a git repository; run `git init` and commit first",
                plan_root.display()
            )
        })?;
        let workdir = repo
            .workdir()
            .ok_or_else(|| anyhow!("the repository is bare; run from a checkout"))?
            .canonicalize()?;
        let root = plan_root.canonicalize()?;
        let plan_rel = root
            .strip_prefix(&workdir)
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let worktrees = state_dir.join("worktrees");
        // Keep the supervisor's files out of `git status` in the person's checkout.
        let exclude = repo.path().join("info/exclude");
        let rel_state = state_dir.canonicalize().ok().and_then(|s| {
            s.strip_prefix(&workdir)
                .ok()
                .map(|p| format!("/{}/", p.display()))
        });
        if let Some(line) = rel_state {
            let _held = lock_repository(repo.commondir())?;
            let current = std::fs::read_to_string(&exclude).unwrap_or_default();
            if !current.lines().any(|l| l == line) {
                let _ = std::fs::create_dir_all(exclude.parent().unwrap_or(Path::new(".")));
                let _ = std::fs::write(
                    &exclude,
                    format!(
                        "{current}{}{line}\n",
                        if current.is_empty() || current.ends_with('\n') {
                            ""
                        } else {
                            "\n"
                        }
                    ),
                );
            }
        }
        Ok(Git {
            repo,
            plan_rel,
            worktrees,
        })
    }

    /// Removes git lock files a killed supervisor may have left on what it
    /// writes: the operation's refs and its worktrees' indexes. Only locks older
    /// than `older_than` go — git holds a lock for milliseconds, so an old one is
    /// stale, while a live agent's fresh one is left alone — except on the refs
    /// of branches no agent works on, which go at any age (see below). Call it holding the
    /// supervisor lock. Only operation `op`'s refs and worktrees are looked at,
    /// and the worktrees and refs of `live` branches are skipped:
    /// an agent still works there.
    pub fn clear_stale_locks(
        &self,
        older_than: std::time::Duration,
        op: &str,
        live: &[String],
    ) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "lock") {
                    out.push(p);
                }
            }
        }
        let git_dir = self.repo.commondir().to_path_buf();
        let mut candidates = Vec::new();
        // Only this operation's refs and worktrees: another plan's supervisor
        // may be working in the same repository.
        walk(
            &git_dir.join("refs/heads/supervise").join(op),
            &mut candidates,
        );
        let ours = format!("supervise-{op}-");
        if let Ok(entries) = std::fs::read_dir(git_dir.join("worktrees")) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&ours) {
                    walk(&e.path(), &mut candidates);
                }
            }
        }
        candidates.push(git_dir.join("packed-refs.lock"));
        let spared: Vec<PathBuf> = live
            .iter()
            .flat_map(|b| {
                [
                    git_dir.join("worktrees").join(self.worktree_of(b)),
                    git_dir.join("refs/heads").join(b),
                ]
            })
            .collect();
        candidates.retain(|p| {
            !spared
                .iter()
                .any(|s| p.starts_with(s) || p.with_extension("") == *s)
        });
        let now = std::time::SystemTime::now();
        let mut removed = Vec::new();
        // However old, a lock some process has open is in use (a long `git
        // gc` packing refs, a hook): only a lock nobody holds is stale.
        let open = open_files();
        // A branch ref of this operation with no agent on it is written by
        // the supervisor alone, and we hold the supervisor lock: a lock on it
        // is a killed supervisor's, however fresh. (A supervisor restarted at
        // once found it under five seconds old, failed to cut the sprint's
        // branch, and counted that as a failed attempt, restart after restart,
        // until the sprint was BLOCKED.)
        let our_refs = git_dir.join("refs/heads/supervise").join(op);
        for p in candidates {
            let old = p.starts_with(&our_refs)
                || std::fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|age| age >= older_than);
            if old && !open.contains(&p) && std::fs::remove_file(&p).is_ok() {
                tracing::warn!(path = %p.display(), "removed a stale git lock left by a crash");
                removed.push(p);
            }
        }
        removed
    }

    pub fn head_commit(&self) -> Result<Oid> {
        let head = self
            .repo
            .head()
            .context("the repository has no commits yet; commit the plan first")?;
        Ok(head.peel_to_commit()?.id())
    }

    fn branch_oid(&self, name: &str) -> Result<Option<Oid>> {
        match self.repo.find_branch(name, BranchType::Local) {
            Ok(b) => Ok(Some(b.get().peel_to_commit()?.id())),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The text of `path` (from the repository's top) at commit `at`, if it
    /// is a file there and reads as UTF-8.
    pub fn file_at(&self, at: &str, path: &str) -> Option<String> {
        let commit = self.repo.revparse_single(at).ok()?.peel_to_commit().ok()?;
        let entry = commit.tree().ok()?.get_path(Path::new(path)).ok()?;
        let blob = entry.to_object(&self.repo).ok()?.peel_to_blob().ok()?;
        String::from_utf8(blob.content().to_vec()).ok()
    }

    /// The head of branch `name`, if it exists.
    pub fn branch_head(&self, name: &str) -> Option<String> {
        self.branch_oid(name).ok().flatten().map(|o| o.to_string())
    }

    /// Sets refused work aside: the sprint branch goes back to `base` (where
    /// the attempt began; its worktree too, when it is on the branch), and
    /// what the agent left is kept at `refs/supervise/refused/<dispatch>` for
    /// a person to look at. The next attempt starts from work that was not
    /// refused.
    pub fn set_aside(&self, branch: &str, base: &str, dispatch: &str) -> Result<()> {
        let Some(head) = self.branch_oid(branch)? else {
            return Ok(());
        };
        let base = Oid::from_str(base)?;
        if head == base {
            return Ok(());
        }
        let _held = self.lock()?;
        self.repo.reference(
            &format!("refs/supervise/refused/{}", dispatch.replace('/', "__")),
            head,
            true,
            "supervise: refused work set aside",
        )?;
        let name = self.worktree_of(branch);
        let on_branch = self.worktree_whole(&name)
            && Repository::open(self.worktrees.join(&name))
                .ok()
                .and_then(|wt| {
                    wt.head()
                        .ok()
                        .and_then(|h| h.name().ok().map(str::to_string))
                })
                .is_some_and(|h| h == format!("refs/heads/{branch}"));
        if on_branch {
            let wt = Repository::open(self.worktrees.join(&name))?;
            let commit = wt.find_object(base, None)?;
            wt.reset(&commit, git2::ResetType::Hard, None)?;
        } else {
            self.repo.reference(
                &format!("refs/heads/{branch}"),
                base,
                true,
                "supervise: refused work set aside",
            )?;
        }
        Ok(())
    }

    /// Creates the integration branch from `start` unless it exists
    /// (idempotent), and keeps `start` as the operation's starting commit.
    pub fn ensure_integration(&self, op: &str, start: Oid) -> Result<Oid> {
        let name = integration_branch(op);
        if self.repo.find_reference(&start_ref(op)).is_err() {
            self.repo
                .reference(&start_ref(op), start, false, "supervise: starting commit")?;
        }
        if let Some(oid) = self.branch_oid(&name)? {
            return Ok(oid);
        }
        self.repo
            .branch(&name, &self.repo.find_commit(start)?, false)?;
        Ok(start)
    }

    /// The commit operation `op` started from (for operations started before
    /// it was kept: none).
    pub fn start_commit(&self, op: &str) -> Option<Oid> {
        self.repo
            .find_reference(&start_ref(op))
            .ok()
            .and_then(|r| r.target())
    }

    /// Commits `files` (path, content) on the integration branch unless its
    /// head already holds them as given (idempotent: a restart between the
    /// branch and this commit writes them once).
    pub fn seed_integration(
        &self,
        op: &str,
        files: &[(String, String)],
        message: &str,
    ) -> Result<Oid> {
        let head = self.repo.find_commit(self.integration_head(op)?)?;
        let tree = head.tree()?;
        let mut update = git2::build::TreeUpdateBuilder::new();
        let mut changed = false;
        for (path, content) in files {
            let blob = self.repo.blob(content.as_bytes())?;
            let same = tree.get_path(Path::new(path)).is_ok_and(|e| e.id() == blob);
            if !same {
                update.upsert(path.as_str(), blob, git2::FileMode::Blob);
                changed = true;
            }
        }
        if !changed {
            return Ok(head.id());
        }
        let new_tree = self
            .repo
            .find_tree(update.create_updated(&self.repo, &tree)?)?;
        let sig = signature(&self.repo);
        let oid = self.repo.commit(
            Some(&format!("refs/heads/{}", integration_branch(op))),
            &sig,
            &sig,
            message,
            &new_tree,
            &[&head],
        )?;
        Ok(oid)
    }

    /// Writes the operation's name into the plan's frontmatter on the
    /// integration branch (§2–3). A plan that is not committed there (run
    /// from an uncommitted file) is left as it is.
    pub fn name_plan(&self, op: &str, plan_file: &Path, name: &str) -> Result<()> {
        let path = self.plan_rel.join(plan_file);
        let head = self.repo.find_commit(self.integration_head(op)?)?;
        let Ok(entry) = head.tree()?.get_path(&path) else {
            return Ok(());
        };
        let blob = self.repo.find_blob(entry.id())?;
        let Ok(text) = std::str::from_utf8(blob.content()) else {
            return Ok(());
        };
        let named = crate::plan::frontmatter::with_feature_name(text, name);
        let path = path.to_string_lossy().into_owned();
        self.seed_integration(
            op,
            &[(path, named)],
            &format!("supervise: the operation is named {name}"),
        )?;
        Ok(())
    }

    pub fn integration_head(&self, op: &str) -> Result<Oid> {
        self.branch_oid(&integration_branch(op))?.ok_or_else(|| {
            anyhow!(
                "the integration branch {} is missing",
                integration_branch(op)
            )
        })
    }

    /// The worktree `branch` is worked on in. A unit's sprints run one after
    /// another, so its sprint branches share one, `supervise-OP-UNIT-sprints`,
    /// which each sprint's first attempt moves on to its branch (see
    /// [`enter_branch`]): a checkout of the whole tree for every sprint cost
    /// a repository of thousands of files all of them each time. Other
    /// branches (the build gate's) have their own, named after the branch —
    /// as has a sprint whose worktree an earlier version made, which keeps it.
    pub fn worktree_of(&self, branch: &str) -> String {
        let own = branch.replace('/', "-");
        match crate::contract::sprint_branch_unit(branch) {
            Some((op, unit)) if !self.worktree_whole(&own) => {
                format!("supervise-{op}-{unit}-sprints")
            }
            _ => own,
        }
    }

    /// The worktree for `branch` (see [`Git::worktree_of`]), made at first
    /// use, and the branch, cut from the integration head if it is new.
    /// Returns the project root inside the worktree (where the agent runs);
    /// the worktree may still be on the unit's sprint before, until the
    /// attempt's wrapper moves it on.
    pub fn ensure_sprint_worktree(&self, op: &str, branch: &str) -> Result<PathBuf> {
        let name = self.worktree_of(branch);
        let path = self.worktrees.join(&name);
        if self.branch_oid(branch)?.is_none() || !self.worktree_whole(&name) {
            let _held = self.lock()?;
            if self.branch_oid(branch)?.is_none() {
                let base = self.repo.find_commit(self.integration_head(op)?)?;
                self.repo.branch(branch, &base, false)?;
            }
            self.make_worktree(&name, branch)?;
        }
        Ok(path.join(&self.plan_rel))
    }

    /// Where the making of worktree `name` is marked while it goes on.
    fn making_mark(&self, name: &str) -> PathBuf {
        self.worktrees.join(format!("{name}.making"))
    }

    /// Whether worktree `name` exists and its making finished.
    fn worktree_whole(&self, name: &str) -> bool {
        self.worktrees.join(name).join(".git").is_file() && !self.making_mark(name).exists()
    }

    /// Makes worktree `name` on `branch`, holding the repository lock. A
    /// supervisor killed while making one leaves it half-made — a directory
    /// without `.git` (which libgit2 refuses to make a worktree in), a `.git`
    /// file cut short, git's record without its directory, or a checkout
    /// missing files (whose removal an agent would commit) — and its mark
    /// says so: what it left is removed and the worktree made again. The mark
    /// goes only when the worktree is whole, so one made by an older version
    /// (which had none) counts as whole. A worktree is made given to `branch`
    /// (see [`enter_branch`]).
    fn make_worktree(&self, name: &str, branch: &str) -> Result<()> {
        fn remove_all(p: &Path) -> Result<()> {
            match std::fs::remove_dir_all(p) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(e).with_context(|| format!("removing {}", p.display()))
                }
                _ => Ok(()),
            }
        }
        if self.worktree_whole(name) {
            return Ok(()); // made while we waited for the lock
        }
        let path = self.worktrees.join(name);
        let mark = self.making_mark(name);
        std::fs::create_dir_all(&self.worktrees)?;
        std::fs::write(&mark, branch).with_context(|| format!("writing {}", mark.display()))?;
        remove_all(&path)?;
        remove_all(&self.repo.commondir().join("worktrees").join(name))?;
        let reference = self
            .repo
            .find_branch(branch, BranchType::Local)?
            .into_reference();
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        self.repo
            .worktree(name, &path, Some(&opts))
            .with_context(|| format!("creating the worktree for {branch}"))?;
        record_given(&self.repo.commondir().join("worktrees").join(name), branch)?;
        std::fs::remove_file(&mark).with_context(|| format!("removing {}", mark.display()))?;
        Ok(())
    }

    /// Commits on the sprint branch not yet in the integration branch, uncommitted
    /// paths in its worktree, and whether it would merge cleanly.
    /// What the sprint branch's own commits change (repository paths, since
    /// it left the integration branch), and the plan file as its head has it
    /// (`plan_file`: the plan's file name in its directory; `None` when the
    /// head has none): what [`crate::engine::trust::refusal`] judges.
    pub fn branch_changes(
        &self,
        op: &str,
        branch: &str,
        plan_file: &str,
    ) -> Result<(Vec<String>, String, Option<String>)> {
        let plan_path = self
            .plan_rel
            .join(plan_file)
            .to_string_lossy()
            .replace('\\', "/");
        let integ = self.integration_head(op)?;
        let Some(head) = self.branch_oid(branch)? else {
            return Ok((Vec::new(), plan_path, None));
        };
        let base = self.repo.merge_base(integ, head)?;
        let old = self.repo.find_commit(base)?.tree()?;
        let new = self.repo.find_commit(head)?.tree()?;
        let diff = self.repo.diff_tree_to_tree(Some(&old), Some(&new), None)?;
        let mut changed = Vec::new();
        for d in diff.deltas() {
            for f in [d.old_file(), d.new_file()] {
                if let Some(p) = f.path().and_then(|p| p.to_str()) {
                    if !changed.iter().any(|c: &String| c == p) {
                        changed.push(p.to_string());
                    }
                }
            }
        }
        let plan = new
            .get_path(Path::new(&plan_path))
            .ok()
            .and_then(|e| e.to_object(&self.repo).ok())
            .and_then(|o| {
                o.as_blob()
                    .map(|b| String::from_utf8_lossy(b.content()).into_owned())
            });
        Ok((changed, plan_path, plan))
    }

    /// Why the sprint branch's own commits (since it left the integration
    /// branch) are refused for carrying a secret, if they are
    /// ([`crate::attempt::evidence::secret_in_commits`]).
    pub fn secret_in_branch(&self, op: &str, branch: &str) -> Result<Option<String>> {
        let integ = self.integration_head(op)?;
        let Some(head) = self.branch_oid(branch)? else {
            return Ok(None);
        };
        let base = self.repo.merge_base(integ, head)?;
        let dir = self.repo.path().to_path_buf();
        crate::attempt::evidence::secret_in_commits(&dir, &base.to_string(), &head.to_string())
    }

    pub fn evidence(&self, op: &str, branch: &str) -> Result<BranchEvidence> {
        let mut ev = BranchEvidence::default();
        let integ = self.integration_head(op)?;
        let Some(head) = self.branch_oid(branch)? else {
            return Ok(ev);
        };
        let mut walk = self.repo.revwalk()?;
        walk.push(head)?;
        walk.hide(integ)?;
        for oid in walk {
            ev.commits
                .push(crate::contract::short_id(&oid?.to_string()));
        }
        let name = self.worktree_of(branch);
        // A worktree left half-made had no agent in it: nothing to report.
        if self.worktree_whole(&name) {
            let wt = Repository::open(self.worktrees.join(&name))?;
            let mut opts = StatusOptions::new();
            opts.include_untracked(true)
                .recurse_untracked_dirs(true)
                .include_ignored(false);
            for s in wt.statuses(Some(&mut opts))?.iter() {
                if let Ok(p) = s.path() {
                    ev.uncommitted.push(p.to_string());
                }
            }
        }
        if !self.repo.graph_descendant_of(head, integ)? && head != integ {
            let idx = self.repo.merge_commits(
                &self.repo.find_commit(integ)?,
                &self.repo.find_commit(head)?,
                None,
            )?;
            if idx.has_conflicts() {
                let paths: Vec<String> = idx
                    .conflicts()?
                    .filter_map(|c| c.ok())
                    .filter_map(|c| {
                        c.our
                            .or(c.their)
                            .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                    })
                    .collect();
                let integration = integration_branch(op);
                ev.merge_conflict = Some(format!(
                    "`git merge {integration}` conflicts in {}",
                    paths.join(", "),
                ));
            }
        }
        Ok(ev)
    }

    /// Merges a verified sprint branch into the integration branch. Idempotent: a
    /// branch already contained in the integration branch is a no-op.
    pub fn integrate(&self, op: &str, branch: &str, message: &str) -> Result<()> {
        match self.branch_oid(branch)? {
            Some(head) => self.integrate_commit(op, head, message),
            None => Ok(()),
        }
    }

    /// Merges `head` into the integration branch, fast-forward where it can;
    /// a commit already contained is a no-op.
    pub fn integrate_commit(&self, op: &str, head: Oid, message: &str) -> Result<()> {
        let integ = self.integration_head(op)?;
        if head == integ || self.repo.graph_descendant_of(integ, head)? {
            return Ok(());
        }
        let refname = format!("refs/heads/{}", integration_branch(op));
        if self.repo.graph_descendant_of(head, integ)? {
            self.repo.reference(&refname, head, true, message)?;
            return Ok(());
        }
        let (ours, theirs) = (self.repo.find_commit(integ)?, self.repo.find_commit(head)?);
        let mut idx = self.repo.merge_commits(&ours, &theirs, None)?;
        if idx.has_conflicts() {
            return Err(anyhow!(
                "{head} no longer merges cleanly into {}",
                integration_branch(op)
            ));
        }
        let tree = self.repo.find_tree(idx.write_tree_to(&self.repo)?)?;
        let sig = signature(&self.repo);
        self.repo.commit(
            Some(&refname),
            &sig,
            &sig,
            message,
            &tree,
            &[&ours, &theirs],
        )?;
        Ok(())
    }

    /// Whether the integration branch's history contains `commit`.
    pub fn holds_commit(&self, op: &str, commit: Oid) -> Result<bool> {
        let integ = self.integration_head(op)?;
        Ok(commit == integ || self.repo.graph_descendant_of(integ, commit)?)
    }

    /// A clean checkout of the integration head for the build gate.
    pub fn gate_worktree(&self, op: &str) -> Result<PathBuf> {
        self.gate_worktree_at(op, self.integration_head(op)?)
    }

    /// The build gate's checkout, clean, at `head`.
    pub fn gate_worktree_at(&self, op: &str, head: Oid) -> Result<PathBuf> {
        let branch = gate_branch(op);
        let commit = self.repo.find_commit(head)?;
        self.repo.branch(&branch, &commit, true)?;
        let name = self.worktree_of(&branch);
        let path = self.worktrees.join(&name);
        if !self.worktree_whole(&name) {
            let _held = self.lock()?;
            self.make_worktree(&name, &branch)?;
        }
        reset_clean(&path, head)?;
        Ok(path.join(&self.plan_rel))
    }

    /// The worktree where `branch`'s work is checked out, if it is.
    pub fn worktree_path(&self, branch: &str) -> Option<PathBuf> {
        let name = self.worktree_of(branch);
        self.worktree_whole(&name)
            .then(|| self.worktrees.join(name))
    }

    /// The root of the build gate's checkout (the gate runs in its plan's
    /// directory below it).
    pub fn gate_root(&self, op: &str) -> PathBuf {
        self.worktrees.join(self.worktree_of(&gate_branch(op)))
    }

    /// The integration branch's first-parent history, oldest first: the
    /// merges (and the starting commit) in the order they landed.
    pub fn integration_line(&self, op: &str) -> Result<Vec<Oid>> {
        let mut walk = self.repo.revwalk()?;
        walk.push(self.integration_head(op)?)?;
        walk.simplify_first_parent()?;
        let mut line = walk.collect::<std::result::Result<Vec<_>, _>>()?;
        line.reverse();
        Ok(line)
    }

    /// Whether `commit` is `ancestor` or comes after it (a lookup that fails
    /// says no: for reports, where [`Git::holds_commit`] decides merges).
    pub fn contains(&self, commit: Oid, ancestor: Oid) -> bool {
        commit == ancestor
            || self
                .repo
                .graph_descendant_of(commit, ancestor)
                .unwrap_or(false)
    }

    /// A commit's first line, for people.
    pub fn subject(&self, commit: Oid) -> String {
        self.repo
            .find_commit(commit)
            .ok()
            .map(|c| String::from_utf8_lossy(c.summary_bytes().unwrap_or_default()).into_owned())
            .unwrap_or_default()
    }

    /// Removes the build gate's checkout until it is wanted again.
    pub fn remove_gate_worktree(&self, op: &str) {
        self.remove_worktree(&self.worktree_of(&gate_branch(op)));
    }

    /// Removes worktree `name` (see [`Git::worktree_of`]); its branches
    /// stay. A unit's goes once its last sprint is merged.
    pub fn remove_worktree(&self, name: &str) {
        let path = self.worktrees.join(name);
        let _held = self.lock();
        let _ = std::fs::remove_dir_all(&path);
        if let Ok(wt) = self.repo.find_worktree(name) {
            let _ = wt.prune(Some(git2::WorktreePruneOptions::new().valid(true)));
        }
    }
}

/// Where an operation's starting commit is kept: a ref outside the
/// branches, so no one works on it and `git gc` keeps the commit.
fn start_ref(op: &str) -> String {
    format!("refs/supervise/{op}/start")
}

fn gate_branch(op: &str) -> String {
    format!("supervise/{op}/gate")
}

/// Every file some process on this machine has open, as the kernel names
/// it (`/proc/<pid>/fd/*`); empty where there is no `/proc`, or for
/// processes this one may not look into.
fn open_files() -> std::collections::HashSet<PathBuf> {
    let mut open = std::collections::HashSet::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return open;
    };
    for p in procs.flatten() {
        if !p
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                open.insert(target);
            }
        }
    }
    open
}

/// Moves the checkout at `root` to `commit`, dropping what is not the
/// commit's: a reset keeps untracked files, and what an earlier gate or check
/// wrote would stand in for files the commit lacks. Ignored ones (build
/// output) stay, or every gate would build from nothing. Opens the checkout
/// itself, so a thread of its own can move it.
pub fn reset_clean(root: &Path, commit: Oid) -> Result<()> {
    let wt = Repository::open(root)?;
    wt.reset(wt.find_commit(commit)?.as_object(), ResetType::Hard, None)?;
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).include_ignored(false);
    for entry in wt.statuses(Some(&mut opts))?.iter() {
        if entry.status().contains(git2::Status::WT_NEW) {
            if let Ok(p) = entry.path() {
                let p = root.join(p);
                let _ = std::fs::remove_dir_all(&p).or_else(|_| std::fs::remove_file(&p));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository holding `files` in one commit, and the supervisor's
    /// view of it: its state directory, and operation `op` begun there.
    fn repository(files: &[(&str, &str)]) -> (tempfile::TempDir, Repository, Git, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init(tmp.path()).unwrap();
        let head = {
            let sig = Signature::now("t", "t@x").unwrap();
            let mut tb = repo.treebuilder(None).unwrap();
            for (name, text) in files {
                let blob = repo.blob(text.as_bytes()).unwrap();
                tb.insert(name, blob, 0o100644).unwrap();
            }
            let tree = repo.find_tree(tb.write().unwrap()).unwrap();
            repo.commit(Some("HEAD"), &sig, &sig, "start", &tree, &[])
                .unwrap()
        };
        let state = tmp.path().join(".supervise");
        std::fs::create_dir_all(&state).unwrap();
        let git = Git::open(tmp.path(), &state).unwrap();
        git.ensure_integration("op", head).unwrap();
        (tmp, repo, git, state)
    }

    /// An old `packed-refs.lock` is left alone while a process holds it open
    /// (a long `git gc`, say) and goes once nobody does.
    #[test]
    fn a_git_lock_a_process_holds_open_is_never_removed() {
        let (tmp, repo, git, _state) = repository(&[("a.txt", "a\n")]);
        let lock = repo.commondir().join("packed-refs.lock");
        let held = std::fs::File::create(&lock).unwrap();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        held.set_modified(hour_ago).unwrap();
        assert!(git
            .clear_stale_locks(std::time::Duration::from_secs(5), "op", &[])
            .is_empty());
        assert!(lock.exists(), "held open: in use");
        drop(held);
        let removed = git.clear_stale_locks(std::time::Duration::from_secs(5), "op", &[]);
        assert_eq!(removed, std::slice::from_ref(&lock));
        drop(tmp);
    }

    /// A supervisor killed while making a sprint's worktree leaves it in one
    /// of several half-made states; the next one makes it whole again, while
    /// a whole worktree (with an agent's uncommitted work) is left alone.
    #[test]
    fn a_half_made_worktree_is_made_again_and_a_whole_one_kept() {
        let (_tmp, _repo, git, state) = repository(&[("a.txt", "a\n"), ("b.txt", "b\n")]);
        let branch = "supervise/op/unit/sprint-1";
        let name = git.worktree_of(branch);
        let dir = state.join("worktrees").join(&name);
        let mark = state.join("worktrees").join(format!("{name}.making"));
        let whole = |why: &str| {
            let root = git.ensure_sprint_worktree("op", branch).unwrap();
            assert_eq!(root, dir, "{why}");
            let wt = Repository::open(&dir).unwrap_or_else(|e| panic!("{why}: {e}"));
            assert!(wt.statuses(None).unwrap().is_empty(), "{why}");
            assert!(
                dir.join("a.txt").exists() && dir.join("b.txt").exists(),
                "{why}"
            );
            assert!(!mark.exists(), "{why}");
        };
        whole("first made");
        let half_made: [(&str, &dyn Fn()); 4] = [
            ("a directory without .git", &|| {
                std::fs::remove_dir_all(&dir).unwrap();
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("a.txt"), "a\n").unwrap();
            }),
            ("a .git file cut short", &|| {
                std::fs::write(&mark, branch).unwrap();
                std::fs::write(dir.join(".git"), "").unwrap();
            }),
            ("a checkout missing a file", &|| {
                std::fs::write(&mark, branch).unwrap();
                std::fs::remove_file(dir.join("b.txt")).unwrap();
            }),
            ("git's record without its directory", &|| {
                std::fs::remove_dir_all(&dir).unwrap();
            }),
        ];
        for (why, leave) in half_made {
            leave();
            whole(why);
        }
        // A whole worktree with an agent's work in it is not made again.
        std::fs::write(dir.join("new.txt"), "work").unwrap();
        git.ensure_sprint_worktree("op", branch).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("new.txt")).unwrap(),
            "work"
        );
        let ev = git.evidence("op", branch).unwrap();
        assert_eq!(ev.uncommitted, vec!["new.txt".to_string()]);
    }

    /// Commits what the worktree at `dir` holds, on its HEAD.
    fn commit_all(dir: &Path, message: &str) -> Oid {
        let wt = Repository::open(dir).unwrap();
        let mut index = wt.index().unwrap();
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        index.write().unwrap();
        let tree = wt.find_tree(index.write_tree().unwrap()).unwrap();
        let parent = wt.head().unwrap().peel_to_commit().unwrap();
        let sig = Signature::now("t", "t@x").unwrap();
        wt.commit(Some("HEAD"), &sig, &sig, message, &tree, &[&parent])
            .unwrap()
    }

    fn head_of(dir: &Path) -> String {
        let wt = Repository::open(dir).unwrap();
        let head = wt.head().unwrap();
        head.shorthand().unwrap().to_string()
    }

    /// A unit's sprints share one worktree. Each sprint's first attempt moves
    /// it on to the sprint's branch and leaves it as a fresh checkout would
    /// be — the sprint before's leftovers gone, ignored files too — while a
    /// later attempt of the same sprint never loses uncommitted work, and a
    /// move cut off part way is made again.
    #[test]
    fn a_units_sprints_share_a_worktree_each_moving_it_on() {
        let (_tmp, _repo, git, state) = repository(&[("a.txt", "a\n"), (".gitignore", "build/\n")]);
        let sprint = |n: u32| format!("supervise/op/unit/sprint-{n}");
        let first = git.ensure_sprint_worktree("op", &sprint(1)).unwrap();
        assert_eq!(first, state.join("worktrees/supervise-op-unit-sprints"));
        assert_eq!(enter_branch(&first, &sprint(1)).unwrap(), Entered::Already);
        // Sprint 1's agent commits one file and leaves three things behind.
        std::fs::write(first.join("one.txt"), "1\n").unwrap();
        commit_all(&first, "agent: one");
        std::fs::write(first.join("a.txt"), "changed\n").unwrap();
        std::fs::write(first.join("stray.txt"), "x").unwrap();
        std::fs::create_dir_all(first.join("build")).unwrap();
        std::fs::write(first.join("build/out"), "x").unwrap();
        git.integrate("op", &sprint(1), "merge 1").unwrap();

        let second = git.ensure_sprint_worktree("op", &sprint(2)).unwrap();
        assert_eq!(second, first, "one worktree for the unit");
        assert_eq!(
            head_of(&second),
            sprint(1),
            "moved by the attempt, not before"
        );
        assert_eq!(enter_branch(&second, &sprint(2)).unwrap(), Entered::Moved);
        assert_eq!(head_of(&second), sprint(2));
        assert_eq!(
            std::fs::read_to_string(second.join("one.txt")).unwrap(),
            "1\n"
        );
        assert_eq!(
            std::fs::read_to_string(second.join("a.txt")).unwrap(),
            "a\n"
        );
        assert!(!second.join("stray.txt").exists());
        assert!(!second.join("build").exists(), "ignored files go too");
        let wt = Repository::open(&second).unwrap();
        assert!(wt.statuses(None).unwrap().is_empty());

        // Sprint 2's agent switches to a branch of its own and leaves
        // uncommitted work that the way back would overwrite: it stays.
        let at = wt.head().unwrap().peel_to_commit().unwrap();
        wt.branch("mine", &at, false).unwrap();
        wt.set_head("refs/heads/mine").unwrap();
        std::fs::write(second.join("a.txt"), "mine\n").unwrap();
        commit_all(&second, "agent: mine");
        std::fs::write(second.join("a.txt"), "unsaved\n").unwrap();
        assert!(matches!(
            enter_branch(&second, &sprint(2)).unwrap(),
            Entered::Stayed(_)
        ));
        assert_eq!(
            std::fs::read_to_string(second.join("a.txt")).unwrap(),
            "unsaved\n"
        );
        // Saved, the next attempt is put back on the sprint's branch.
        commit_all(&second, "agent: saved");
        assert_eq!(
            enter_branch(&second, &sprint(2)).unwrap(),
            Entered::Returned
        );
        assert_eq!(head_of(&second), sprint(2));
        assert_eq!(
            std::fs::read_to_string(second.join("a.txt")).unwrap(),
            "a\n"
        );

        // A move to sprint 3 cut off part way: HEAD moved, files half
        // written, the record not yet changed. The next attempt makes it again.
        git.integrate("op", &sprint(2), "merge 2").unwrap();
        let third = git.ensure_sprint_worktree("op", &sprint(3)).unwrap();
        Repository::open(&third)
            .unwrap()
            .set_head(&format!("refs/heads/{}", sprint(3)))
            .unwrap();
        std::fs::write(third.join("a.txt"), "half").unwrap();
        std::fs::write(third.join("stray.txt"), "x").unwrap();
        assert_eq!(enter_branch(&third, &sprint(3)).unwrap(), Entered::Moved);
        assert_eq!(std::fs::read_to_string(third.join("a.txt")).unwrap(), "a\n");
        assert!(!third.join("stray.txt").exists());
        assert_eq!(enter_branch(&third, &sprint(3)).unwrap(), Entered::Already);

        // The unit's worktree goes with its last sprint; the branches stay.
        git.remove_worktree(&git.worktree_of(&sprint(3)));
        assert!(!third.exists());
        assert!(git.branch_oid(&sprint(3)).unwrap().is_some());
    }

    /// A sprint whose worktree an earlier version made (one per sprint, with
    /// no record of whose it is) keeps it, and an attempt there is only ever
    /// put back on its branch safely.
    #[test]
    fn a_sprint_worktree_made_by_an_earlier_version_is_kept() {
        let (_tmp, repo, git, state) = repository(&[("a.txt", "a\n")]);
        let branch = "supervise/op/unit/sprint-4";
        let head = repo.head().unwrap().peel_to_commit().unwrap();
        repo.branch(branch, &head, false).unwrap();
        let legacy = "supervise-op-unit-sprint-4";
        git.make_worktree(legacy, branch).unwrap();
        std::fs::remove_file(repo.path().join("worktrees").join(legacy).join(GIVEN_TO)).unwrap();
        assert_eq!(git.worktree_of(branch), legacy);
        let dir = git.ensure_sprint_worktree("op", branch).unwrap();
        assert_eq!(dir, state.join("worktrees").join(legacy));
        // Its agent left it elsewhere, with a file of its own.
        let wt = Repository::open(&dir).unwrap();
        let at = wt.head().unwrap().peel_to_commit().unwrap();
        wt.branch("mine", &at, false).unwrap();
        wt.set_head("refs/heads/mine").unwrap();
        std::fs::write(dir.join("notes.txt"), "keep").unwrap();
        assert_eq!(enter_branch(&dir, branch).unwrap(), Entered::Returned);
        assert_eq!(
            std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
            "keep"
        );
        // Other sprints of the unit get the unit's worktree.
        assert_eq!(
            git.worktree_of("supervise/op/unit/sprint-5"),
            "supervise-op-unit-sprints"
        );
    }

    /// An agent that leaves links to directories outside its worktree —
    /// untracked, and inside an ignored directory — loses the links when
    /// the worktree moves on, never what they point to.
    #[test]
    fn a_move_removes_an_agents_links_not_what_they_point_to() {
        let (tmp, _repo, git, _state) = repository(&[("a.txt", "a\n"), (".gitignore", "build/\n")]);
        let outside = tmp.path().with_extension("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "precious").unwrap();
        let sprint = |n: u32| format!("supervise/op/unit/sprint-{n}");
        let dir = git.ensure_sprint_worktree("op", &sprint(1)).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("linked")).unwrap();
        std::fs::create_dir_all(dir.join("build")).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("build/linked")).unwrap();
        git.integrate("op", &sprint(1), "merge 1").unwrap();
        git.ensure_sprint_worktree("op", &sprint(2)).unwrap();
        assert_eq!(enter_branch(&dir, &sprint(2)).unwrap(), Entered::Moved);
        assert!(std::fs::symlink_metadata(dir.join("linked")).is_err());
        assert!(!dir.join("build").exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "precious"
        );
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
