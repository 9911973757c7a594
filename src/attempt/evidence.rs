//! What an attempt's agent left in git, read by the step that checks it:
//! its commits since the run began, the paths they change, and whether any
//! of them carries a secret.

use anyhow::{Context, Result};
use git2::{Oid, Repository};
use std::path::Path;

/// What a run did to its branch, as git in the runner's checkout says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCommits {
    /// The agent's commits since the run began (short ids, newest first),
    /// the supervisor's own (`supervise: …`) left out.
    pub commits: Vec<String>,
    /// Where the run began (full id), when the head still contains it — an
    /// agent that reset or rewrote its branch leaves `None`.
    pub began_at: Option<String>,
    /// The paths the head changes from where the run began (sorted; a
    /// rename is both its paths), with `began_at` only and when there are at
    /// most [`crate::contract::CHANGED_LIMIT`] of them.
    pub changed: Option<Vec<String>>,
}

/// The run's commits in the checkout at `dir` from `since` to `head` (the
/// checkout's HEAD when `None`); `None` when git cannot say (no repository,
/// an unknown commit). A step that runs repository code before it asks
/// names the head it checked: that code may move HEAD, and what is recorded
/// must describe the commit published, not one the code made.
pub fn agent_commits(dir: &Path, since: &str, head: Option<&str>) -> Option<RunCommits> {
    let repo = Repository::discover(dir).ok()?;
    let commit_of = |rev: &str| Some(repo.revparse_single(rev).ok()?.peel_to_commit().ok()?.id());
    let base = commit_of(since)?;
    let head = commit_of(head.unwrap_or("HEAD"))?;
    let contains = head == base || repo.graph_descendant_of(head, base).ok()?;
    let mut walk = repo.revwalk().ok()?;
    walk.push(head).ok()?;
    walk.hide(base).ok()?;
    let mut out = Vec::new();
    for oid in walk {
        let commit = repo.find_commit(oid.ok()?).ok()?;
        if !crate::contract::is_supervisor_commit(commit.message_bytes()) {
            out.push(crate::contract::short_id(&commit.id().to_string()));
        }
    }
    let changed = if contains {
        changed_paths(&repo, base, head)
    } else {
        None
    };
    Some(RunCommits {
        commits: out,
        began_at: contains.then(|| base.to_string()),
        changed,
    })
}

/// The paths that differ between two commits' trees (both sides of a
/// rename: git's diff here detects none), when there are at most
/// [`crate::contract::CHANGED_LIMIT`] of them and every one is UTF-8.
pub(crate) fn changed_paths(repo: &Repository, from: Oid, to: Oid) -> Option<Vec<String>> {
    let tree = |id: Oid| repo.find_commit(id).ok()?.tree().ok();
    let diff = repo
        .diff_tree_to_tree(tree(from).as_ref(), tree(to).as_ref(), None)
        .ok()?;
    let mut paths = std::collections::BTreeSet::new();
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            // A path that is not UTF-8 cannot be listed, and a list without
            // it would say a branch merges cleanly when it may not.
            paths.insert(file.path()?.to_str()?.to_string());
        }
        if paths.len() > crate::contract::CHANGED_LIMIT {
            return None;
        }
    }
    Some(paths.into_iter().collect())
}

/// Why the agent's work is refused for carrying a secret, if it is: the first added line
/// of the commits `base..head` (each commit's own diff, as history keeps
/// every one of them) or the first line of their messages that
/// [`crate::scrub::holds_secret`] finds, named by file, line and commit —
/// never the secret. Work too large to read whole is refused too: unread is
/// not clean. Binary files are not read.
pub fn secret_in_commits(dir: &Path, base: &str, head: &str) -> Result<Option<String>> {
    /// How many added bytes are read before the work counts as too large.
    const READ_LIMIT: usize = 64 << 20;
    let repo = Repository::discover(dir).context("opening the repository to scan the work")?;
    let oid = |rev: &str| -> Result<Oid> {
        Ok(repo
            .revparse_single(rev)
            .with_context(|| format!("finding {rev}"))?
            .peel_to_commit()?
            .id())
    };
    let (base, head) = (oid(base)?, oid(head)?);
    let mut walk = repo.revwalk()?;
    walk.push(head)?;
    walk.hide(base)?;
    let mut read = 0usize;
    for id in walk {
        let commit = repo.find_commit(id?)?;
        let short = crate::contract::short_id(&commit.id().to_string());
        let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
        if let Some(n) = message.lines().position(crate::scrub::holds_secret) {
            return Ok(Some(secret_refusal(&format!(
                "the message of commit {short}, line {}",
                n + 1
            ))));
        }
        let parent = match commit.parent_count() {
            0 => None,
            _ => Some(commit.parent(0)?.tree()?),
        };
        let diff = repo.diff_tree_to_tree(parent.as_ref(), Some(&commit.tree()?), None)?;
        let mut found: Option<String> = None;
        let walked = diff.foreach(
            &mut |_, _| true,
            None,
            None,
            Some(&mut |delta, _, line| {
                if line.origin() != '+' {
                    return true;
                }
                read += line.content().len();
                if read > READ_LIMIT {
                    found = Some(format!(
                        "the agent's commits add more than {} MiB of text (by commit {short}), more than is read for secrets; the work was not taken. Split the change, or commit generated files elsewhere",
                        READ_LIMIT >> 20
                    ));
                    return false;
                }
                let text = String::from_utf8_lossy(line.content());
                if crate::scrub::holds_secret(&text) {
                    let path = delta
                        .new_file()
                        .path()
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    found = Some(secret_refusal(&format!(
                        "`{path}` line {} (commit {short})",
                        line.new_lineno().unwrap_or(0)
                    )));
                    return false;
                }
                true
            }),
        );
        if found.is_some() {
            return Ok(found);
        }
        walked?;
    }
    Ok(None)
}

/// The refusal of work that carries a secret at `at`.
fn secret_refusal(at: &str) -> String {
    format!(
        "the agent's commits carry a secret, at {at}; the work was not taken. The secret is masked in everything published. Rewrite those commits without it (a later commit that deletes it leaves it in history) and rotate it if it is real"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use git2::{ResetType, Signature};

    #[test]
    fn agent_commits_leave_out_the_supervisors_own_and_need_a_known_start() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init(tmp.path()).unwrap();
        let sig = Signature::now("t", "t@x").unwrap();
        let mut parent: Option<Oid> = None;
        let mut shas = Vec::new();
        for msg in [
            "supervise: prompt",
            "agent: work",
            "supervise: results",
            "agent: more",
        ] {
            let tree = repo.treebuilder(None).unwrap().write().unwrap();
            let tree = repo.find_tree(tree).unwrap();
            let parents: Vec<git2::Commit> = parent
                .iter()
                .map(|p| repo.find_commit(*p).unwrap())
                .collect();
            let refs: Vec<&git2::Commit> = parents.iter().collect();
            let id = repo
                .commit(Some("HEAD"), &sig, &sig, msg, &tree, &refs)
                .unwrap();
            shas.push(id.to_string());
            parent = Some(id);
        }
        let listed = agent_commits(tmp.path(), &shas[0], None).unwrap();
        assert_eq!(
            listed.commits,
            vec![shas[3][..7].to_string(), shas[1][..7].to_string()]
        );
        assert_eq!(listed.began_at.as_deref(), Some(shas[0].as_str()));
        let none = agent_commits(tmp.path(), &shas[3], None).unwrap();
        assert_eq!(none.commits, Vec::<String>::new());
        assert_eq!(none.began_at.as_deref(), Some(shas[3].as_str()));
        // The agent moved its branch back: the run's start is no longer in
        // the head, so it is not claimed.
        let head = repo.find_commit(Oid::from_str(&shas[3]).unwrap()).unwrap();
        let back = repo.find_commit(Oid::from_str(&shas[1]).unwrap()).unwrap();
        repo.reset(back.as_object(), ResetType::Hard, None).unwrap();
        let moved = agent_commits(tmp.path(), &head.id().to_string(), None).unwrap();
        assert_eq!(moved.began_at, None);
        assert_eq!(
            agent_commits(tmp.path(), "0123456789abcdef0123456789abcdef01234567", None),
            None
        );
        assert_eq!(agent_commits(tmp.path(), "", None), None);
    }

    /// What the runner records is of the head it names, whatever HEAD is
    /// now (repository code run by the criteria may have committed), and a
    /// path it cannot spell (not UTF-8) leaves the changed paths unsaid
    /// rather than left out.
    #[test]
    fn the_record_describes_the_head_checked_and_lists_only_what_it_can_spell() {
        use std::os::unix::ffi::OsStrExt;
        let tmp = tempfile::tempdir().unwrap();
        let repo = Repository::init(tmp.path()).unwrap();
        let sig = Signature::now("t", "t@x").unwrap();
        // Each moves HEAD but the last, which is beside it.
        let commit = |parent: Option<Oid>, names: &[&[u8]], msg: &str, moves: bool| -> Oid {
            let mut tb = repo.treebuilder(None).unwrap();
            for n in names {
                let blob = repo.blob(n).unwrap();
                tb.insert(std::ffi::OsStr::from_bytes(n), blob, 0o100644)
                    .unwrap();
            }
            let tree = repo.find_tree(tb.write().unwrap()).unwrap();
            let parents: Vec<git2::Commit> = parent
                .iter()
                .map(|p| repo.find_commit(*p).unwrap())
                .collect();
            let refs: Vec<&git2::Commit> = parents.iter().collect();
            repo.commit(moves.then_some("HEAD"), &sig, &sig, msg, &tree, &refs)
                .unwrap()
        };
        let base = commit(None, &[b"a.txt"], "base", true);
        let work = commit(Some(base), &[b"a.txt", b"b.txt"], "agent: work", true);
        // Repository code commits after the head was checked.
        let later = commit(
            Some(work),
            &[b"a.txt", b"b.txt", b"c.txt"],
            "made by a test",
            true,
        );
        let (b, w) = (base.to_string(), work.to_string());
        let checked = agent_commits(tmp.path(), &b, Some(&w)).unwrap();
        assert_eq!(checked.commits, vec![w[..7].to_string()]);
        assert_eq!(checked.changed, Some(vec!["b.txt".to_string()]));
        let at_head = agent_commits(tmp.path(), &b, None).unwrap();
        assert_eq!(at_head.commits.len(), 2, "HEAD moved on to {later}");
        // A name that is not UTF-8.
        let odd = commit(
            Some(base),
            &[b"a.txt", b"caf\xe9.txt"],
            "agent: odd name",
            false,
        );
        let listed = agent_commits(tmp.path(), &b, Some(&odd.to_string())).unwrap();
        assert_eq!(listed.began_at.as_deref(), Some(b.as_str()));
        assert_eq!(listed.changed, None);
    }
}
