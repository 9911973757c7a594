//! Whether a sprint's branch merges cleanly into the integration branch,
//! known without asking GitHub. GitHub computes a pull request's `mergeable`
//! in the background and answers `null` until it has: when the sprints of a
//! wave finish together, each merge moves the integration branch and the next
//! pull request's answer is unknown again, so every sprint after the first
//! waited about a second more than the one before it.
//!
//! What this replica knows instead: the integration heads its own merges left,
//! each with the paths changed on the integration branch since, from the
//! results records of the branches merged (the runner's git lists the paths a
//! run changed from where it began). A branch that began at one of those heads
//! and changed none of those paths merges cleanly: in a three-way merge no
//! path is changed on both sides. What moves the integration branch outside
//! this log (a restart, another replica's turn, a commit of the supervisor's
//! own, a record without its paths) leaves the answer to GitHub. A person's
//! push between two of this replica's merges is the one change the log
//! cannot see (GitHub's merge answer names no parent); the merge itself
//! still refuses a conflict, and then a person is asked.

use crate::engine::DispatchId;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};

/// What an operation's place knows of its integration branch: the head its
/// merges left, the log of those merges, and what waits to be merged.
#[derive(Debug, Default)]
pub(super) struct Merges {
    /// The integration branch's head as this process's last merge left it
    /// (merges of one operation are made one at a time, here); unknown after
    /// a restart or another replica's turn, then read from GitHub.
    pub head: Option<String>,
    /// The integration heads this process's merges left, with the paths
    /// merged since each: whether a verified branch merges cleanly.
    pub log: MergeLog,
    /// The paths each verified run's branch changed (its record's), until
    /// its merge adds them to `log`.
    pub changed: HashMap<DispatchId, Vec<String>>,
    /// Sprints whose wait for a review people were told of.
    pub review_told: HashSet<DispatchId>,
}

impl Merges {
    /// The verified run `dispatch` was merged, leaving the integration
    /// branch at `to` (GitHub may not say): the next dispatch starts from it
    /// unread, and the paths the run changed join the log.
    pub fn merged(&mut self, dispatch: &DispatchId, to: Option<String>) {
        let changed = self.changed.remove(dispatch);
        if let Some(to) = &to {
            self.log
                .merged(self.head.as_deref(), to, changed.as_deref());
        }
        self.head = to;
    }

    /// Something outside this log moved the integration branch (or may
    /// have): its head is read from GitHub again.
    pub fn forget_head(&mut self) {
        self.head = None;
    }

    /// Whether a branch that began at `began_at` and changed `changed`
    /// surely merges cleanly into the integration branch as this process
    /// left it (see [`MergeLog::merges_cleanly`]).
    pub fn clean_since(&self, began_at: Option<&String>, changed: Option<&[String]>) -> bool {
        match (self.head.as_deref(), began_at, changed) {
            (Some(head), Some(began), Some(changed)) => {
                self.log.merges_cleanly(head, began, changed)
            }
            _ => false,
        }
    }
}

/// The most integration heads remembered: a sprint branch begins at a recent
/// one (it is cut when its attempt is dispatched).
const HEADS: usize = 64;

/// The integration heads this replica's merges left, oldest first, each with
/// the paths changed on the integration branch from it to the newest.
#[derive(Debug, Default)]
pub(super) struct MergeLog {
    heads: VecDeque<(String, BTreeSet<String>)>,
}

impl MergeLog {
    /// A merge moved the integration branch from `from` (when known) to `to`,
    /// bringing the paths `changed` (when the merged branch's record listed
    /// them). Without either, what came before is forgotten; a merge from a
    /// head other than the newest one here begins the log anew at `from`.
    pub fn merged(&mut self, from: Option<&str>, to: &str, changed: Option<&[String]>) {
        match (from, changed) {
            (Some(from), Some(paths)) => {
                if self.heads.back().map(|(h, _)| h.as_str()) != Some(from) {
                    self.heads.clear();
                    self.heads.push_back((from.to_string(), BTreeSet::new()));
                }
                for (_, since) in &mut self.heads {
                    since.extend(paths.iter().cloned());
                }
            }
            _ => self.heads.clear(),
        }
        self.heads.push_back((to.to_string(), BTreeSet::new()));
        if self.heads.len() > HEADS {
            self.heads.pop_front();
        }
    }

    /// Whether a branch that began at `began_at` and changed the paths
    /// `changed` surely merges cleanly into the integration branch at `head`:
    /// this log covers every change from `began_at` to `head` and none of
    /// them is among `changed`. False when it cannot say.
    pub fn merges_cleanly(&self, head: &str, began_at: &str, changed: &[String]) -> bool {
        if self.heads.back().map(|(h, _)| h.as_str()) != Some(head) {
            return false;
        }
        self.heads
            .iter()
            .find(|(h, _)| h == began_at)
            .is_some_and(|(_, since)| changed.iter().all(|p| !since.contains(p)))
    }
}

#[cfg(test)]
mod tests {
    use super::MergeLog;
    use git2::{Oid, Repository, Signature};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn paths(v: &[&str]) -> Vec<String> {
        v.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn says_nothing_of_what_it_did_not_see() {
        let mut log = MergeLog::default();
        assert!(!log.merges_cleanly("h0", "h0", &[]));
        log.merged(None, "h1", Some(&paths(&["a"])));
        log.merged(Some("h1"), "h2", Some(&paths(&["b"])));
        assert!(log.merges_cleanly("h2", "h1", &paths(&["c"])));
        // b was merged since h1.
        assert!(!log.merges_cleanly("h2", "h1", &paths(&["b"])));
        // The branch moved since this replica's last merge (a person pushed).
        assert!(!log.merges_cleanly("h9", "h1", &paths(&["c"])));
        // A head before the log began.
        assert!(!log.merges_cleanly("h2", "h0", &paths(&["c"])));
        // A merge whose paths are unknown forgets what came before it.
        log.merged(Some("h2"), "h3", None);
        assert!(!log.merges_cleanly("h3", "h1", &paths(&["c"])));
        assert!(log.merges_cleanly("h3", "h3", &paths(&["b"])));
        // A merge from a head the log did not end at begins it anew there.
        log.merged(Some("h1"), "h4", Some(&paths(&["d"])));
        assert!(!log.merges_cleanly("h4", "h3", &paths(&["c"])));
        assert!(log.merges_cleanly("h4", "h1", &paths(&["c"])));
        assert!(!log.merges_cleanly("h4", "h1", &paths(&["d"])));
    }

    /// A commit on `parents` whose tree is `files` (flat paths).
    fn commit(repo: &Repository, parents: &[Oid], files: &BTreeMap<String, String>) -> Oid {
        let mut tree = repo.treebuilder(None).unwrap();
        for (path, text) in files {
            let blob = repo.blob(text.as_bytes()).unwrap();
            tree.insert(path, blob, 0o100644).unwrap();
        }
        let tree = repo.find_tree(tree.write().unwrap()).unwrap();
        let sig = Signature::now("t", "t@x").unwrap();
        let parents: Vec<git2::Commit> = parents
            .iter()
            .map(|p| repo.find_commit(*p).unwrap())
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "c", &tree, &refs).unwrap()
    }

    fn tree_of(repo: &Repository, id: Oid) -> BTreeMap<String, String> {
        let mut files = BTreeMap::new();
        let tree = repo.find_commit(id).unwrap().tree().unwrap();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, e| {
            if let Some(blob) = e.to_object(repo).ok().and_then(|o| o.into_blob().ok()) {
                let name = format!("{dir}{}", e.name().unwrap_or_default());
                files.insert(name, String::from_utf8_lossy(blob.content()).into_owned());
            }
            git2::TreeWalkResult::Ok
        })
        .unwrap();
        files
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Branches cut from the integration branch at different heads, each
        /// writing or deleting a few of a handful of paths, merged one after
        /// another by real git: whenever the log says a branch merges
        /// cleanly, git's merge of it has no conflict.
        #[test]
        fn a_clean_answer_is_a_clean_merge(
            branches in proptest::collection::vec(
                (0usize..4, proptest::collection::btree_map(0usize..6, proptest::option::of(0u8..3), 1..4)),
                2..8,
            )
        ) {
            let tmp = tempfile::tempdir().unwrap();
            let repo = Repository::init_bare(tmp.path()).unwrap();
            let base: BTreeMap<String, String> =
                (0..6).map(|i| (format!("f{i}"), format!("base {i}\n"))).collect();
            let mut heads = vec![commit(&repo, &[], &base)];
            let mut log = MergeLog::default();
            for (n, (back, edits)) in branches.iter().enumerate() {
                // The branch began at a recent head of the integration branch.
                let began = heads[heads.len().saturating_sub(1 + back)];
                let mut files = tree_of(&repo, began);
                for (i, edit) in edits {
                    let path = format!("f{i}");
                    match edit {
                        Some(v) => { files.insert(path, format!("branch {n} wrote {v}\n")); }
                        None => { files.remove(&path); }
                    }
                }
                let tip = commit(&repo, &[began], &files);
                // What the runner records of the branch.
                let changed = crate::attempt::evidence::changed_paths(&repo, began, tip).unwrap();
                let head = *heads.last().unwrap();
                let said = log.merges_cleanly(&head.to_string(), &began.to_string(), &changed);
                let ours = repo.find_commit(head).unwrap();
                let theirs = repo.find_commit(tip).unwrap();
                let mut merged = repo.merge_commits(&ours, &theirs, None).unwrap();
                if said {
                    prop_assert!(!merged.has_conflicts(), "the log said branch {n} merges cleanly; git found a conflict");
                }
                if merged.has_conflicts() {
                    // GitHub would refuse it: the integration branch stays.
                    continue;
                }
                let tree = repo.find_tree(merged.write_tree_to(&repo).unwrap()).unwrap();
                let sig = Signature::now("t", "t@x").unwrap();
                let next = repo.commit(None, &sig, &sig, "merge", &tree, &[&ours, &theirs]).unwrap();
                log.merged(Some(&head.to_string()), &next.to_string(), Some(&changed));
                heads.push(next);
            }
        }
    }
}
