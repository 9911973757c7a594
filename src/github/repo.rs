//! Typed calls on one repository, each a thin wrapper over one REST endpoint,
//! its answer read into the structs of [`answers`].
//! Creation calls are written to be safe to repeat: they look first, or treat
//! GitHub's "already exists" answer as success.

use super::answers::{self, read, read_list, IssueId};
use super::{GitHub, GitHubError};
use base64::Engine;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

pub struct Repo<'a> {
    pub gh: &'a GitHub,
    pub installation: u64,
    pub name: &'a str,
}

/// Percent-encodes a path segment or query value.
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The most pages of a workflow's runs one reconciliation looks through
/// ([`RUN_PAGE`] runs each); a run in flight older than those is read on its
/// own (conditionally too: free while it is unchanged).
pub const RUN_PAGES: usize = 5;
/// Runs on a page of a workflow's newest runs: GitHub's default page. The
/// runs in flight are almost always the newest few, and the page is read
/// again whenever any run of the repository changes, and read back from the
/// ETag cache on every free look while none does: its size is paid on every
/// reconciliation. GitHub's runs are large: each carries its repository, its
/// head repository, its commit and two users (11.7 KB in the example of
/// GitHub's REST description), so a page of 100 is more than a megabyte.
pub const RUN_PAGE: usize = 30;

/// The longest body GitHub takes for an issue, comment or pull request.
pub const MAX_BODY_CHARS: usize = 65_536;
/// The longest check-run `output.summary` or `output.text`.
pub const MAX_CHECK_CHARS: usize = 65_535;

/// `text` cut to at most `max` characters (GitHub counts characters) with a
/// note saying so; a trailing `<!-- … -->` marker line is kept, since replies
/// and status comments are found again by it.
///
/// Every body the App writes passes through here, so it is also where
/// secrets are masked ([`crate::scrub`]) and mentions made inert
/// ([`crate::text::inert_mentions`]).
pub fn fit(text: &str, max: usize) -> String {
    let inert = crate::text::inert_mentions(&crate::scrub::scrub(text));
    let text = inert.as_str();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let (body, marker) = match text.trim_end().rsplit_once('\n') {
        Some((b, last)) if last.starts_with("<!--") && last.ends_with("-->") => (b, Some(last)),
        _ => (text, None),
    };
    let note = format!("\n\n… _(cut here: GitHub takes at most {max} characters)_");
    if note.chars().count() + marker.map_or(0, |m| m.chars().count() + 1) >= max {
        return text.chars().take(max).collect();
    }
    let keep = max
        .saturating_sub(note.chars().count())
        .saturating_sub(marker.map_or(0, |m| m.chars().count() + 1));
    let mut out: String = body.chars().take(keep).collect();
    out.push_str(&note);
    if let Some(m) = marker {
        out.push('\n');
        out.push_str(m);
    }
    out
}

/// What came of a merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Merged now (with the merge commit, which is the base's new head), or
    /// before (a repeated effect: the head is not known from it).
    Merged(Option<String>),
    /// GitHub cannot merge it (405): a conflict.
    Conflict,
    /// The head is not the commit asked for (409): the branch moved.
    HeadMoved,
}

#[derive(Debug, Clone)]
pub struct PullRequest {
    pub number: i64,
    pub state: String,
    pub merged: bool,
    pub mergeable: Option<bool>,
    pub head_sha: Option<String>,
    /// The head's branch name.
    pub head_branch: Option<String>,
    /// Once merged: the merge's commit, and when (RFC 3339).
    pub merge_sha: Option<String>,
    pub merged_at: Option<String>,
}

impl From<answers::Pull> for PullRequest {
    fn from(p: answers::Pull) -> PullRequest {
        PullRequest {
            number: p.number,
            state: p.state,
            // List items carry only `merged_at`; the pull request itself both.
            merged: p.merged == Some(true) || p.merged_at.is_some(),
            mergeable: p.mergeable,
            head_sha: Some(p.head.sha),
            head_branch: p.head.branch,
            merge_sha: p.merge_commit_sha.filter(|_| p.merged_at.is_some()),
            merged_at: p.merged_at,
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WorkflowRun {
    pub id: i64,
    pub title: String,
    pub status: String,
    pub conclusion: Option<String>,
    pub html_url: String,
}

impl From<answers::Run> for WorkflowRun {
    fn from(r: answers::Run) -> WorkflowRun {
        WorkflowRun {
            id: r.id,
            title: r.display_title,
            // Null while GitHub has not said: not completed.
            status: r.status.unwrap_or_default(),
            conclusion: r.conclusion,
            html_url: r.html_url,
        }
    }
}

impl WorkflowRun {
    /// Whether this run carries `dispatch` in its name (the template's `run-name`).
    pub fn carries(&self, dispatch: &str) -> bool {
        self.title.split_whitespace().any(|w| w == dispatch)
    }
}

/// A check run someone else (the repository's CI) reported on a commit.
#[derive(Debug, Clone)]
pub struct Check {
    pub id: i64,
    pub name: String,
    /// Where a person reads more (for an Actions job, its page).
    pub details_url: Option<String>,
    /// Who made it: the App's slug and id as GitHub names them.
    pub app: String,
    pub app_id: Option<u64>,
    pub completed: bool,
    pub conclusion: Option<String>,
    pub external_id: String,
    pub summary: String,
    /// `output.text`: the details (the final verification's results, as
    /// JSON).
    pub text: String,
}

impl Check {
    /// Whether this is the supervisor's own (its verdicts and the trusted
    /// step's results records), not the repository's CI: named so, and made
    /// by the App itself (`app`, when the client knows which it is) or by a
    /// workflow's token (the GitHub Action, and the agent workflow's trusted
    /// job without the App's key).
    pub fn is_supervisors(&self, app: Option<u64>) -> bool {
        self.name.starts_with("supervise:")
            && (app.is_some() && self.app_id == app
                || self.app == crate::contract::GITHUB_ACTIONS_APP)
    }

    /// The GitHub Actions job behind the check, if it is one: its id is the
    /// last part of the job's page (`…/actions/runs/{run}/job/{job}`).
    pub fn job(&self) -> Option<i64> {
        let url = self.details_url.as_deref()?;
        let (before, id) = url.trim_end_matches('/').rsplit_once('/')?;
        before.ends_with("/job").then(|| id.parse().ok()).flatten()
    }

    pub fn green(&self) -> bool {
        matches!(
            self.conclusion.as_deref(),
            Some("success" | "neutral" | "skipped")
        )
    }
}

impl Repo<'_> {
    fn path(&self, rest: &str) -> String {
        format!("/repos/{}{rest}", self.name)
    }

    async fn get<T: DeserializeOwned>(&self, rest: &str) -> Result<T, GitHubError> {
        let path = self.path(rest);
        let v = self.gh.get(self.installation, &path).await?.json();
        read(&format!("GET {path}"), v)
    }

    /// Every item of a list below the repository, all pages.
    async fn list<T: DeserializeOwned>(
        &self,
        rest: &str,
        key: Option<&str>,
    ) -> Result<Vec<T>, GitHubError> {
        self.gh
            .get_all(self.installation, &self.path(rest), key)
            .await
    }

    async fn post<T: DeserializeOwned>(&self, rest: &str, body: Value) -> Result<T, GitHubError> {
        let path = self.path(rest);
        let v = self.gh.post(self.installation, &path, &body).await?.json();
        read(&format!("POST {path}"), v)
    }

    /// A POST whose answer is not read.
    async fn send(&self, rest: &str, body: Value) -> Result<(), GitHubError> {
        self.gh
            .post(self.installation, &self.path(rest), &body)
            .await
            .map(|_| ())
    }

    pub async fn default_branch(&self) -> Result<String, GitHubError> {
        Ok(self.get::<answers::Repository>("").await?.default_branch)
    }

    /// The branch's head commit, or None when there is no such branch.
    pub async fn branch_sha(&self, branch: &str) -> Result<Option<String>, GitHubError> {
        match self
            .get::<answers::GitRef>(&format!("/git/ref/heads/{}", enc(branch)))
            .await
        {
            Ok(r) => Ok(Some(r.object.sha)),
            Err(GitHubError::Http { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates a branch at `sha`; an existing branch is left as it is. True
    /// when the branch was made now (so nothing can be on it yet but `sha`).
    pub async fn create_branch(&self, branch: &str, sha: &str) -> Result<bool, GitHubError> {
        let body = json!({ "ref": format!("refs/heads/{branch}"), "sha": sha });
        // GitHub never makes a ref twice (the second is refused, 422), so a
        // POST whose answer was lost is sent again here rather than failing
        // all that led to it: it makes the ref, or says it exists.
        let mut unknown = 0;
        loop {
            match self.send("/git/refs", body.clone()).await {
                Ok(()) => return Ok(true),
                Err(GitHubError::Http {
                    status: 422, body, ..
                }) if body.contains("already exists") => return Ok(false),
                Err(GitHubError::Transport { .. }) if unknown < 2 => unknown += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// A file's text and blob sha at a ref (None: the default branch), or None
    /// when there is no such file. Text that is not UTF-8 is an error.
    pub async fn file(
        &self,
        path: &str,
        rev: Option<&str>,
    ) -> Result<Option<(String, String)>, GitHubError> {
        let query = rev.map(|r| format!("?ref={}", enc(r))).unwrap_or_default();
        let file = match self
            .get::<answers::FileContent>(&format!("/contents/{}{query}", enc(path)))
            .await
        {
            Ok(f) => f,
            Err(GitHubError::Http { status: 404, .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let encoded: String = file
            .content
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let text = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| GitHubError::Http {
                status: 422,
                what: format!("reading {path}"),
                body: "the file is not UTF-8 text".into(),
            })?;
        Ok(Some((text, file.sha)))
    }

    /// Commits `text` at `path` on `branch` unless it is there already; returns
    /// the new commit's sha when one was made.
    pub async fn put_file(
        &self,
        branch: &str,
        path: &str,
        text: &str,
        message: &str,
    ) -> Result<Option<String>, GitHubError> {
        let existing = self.file(path, Some(branch)).await?;
        if existing.as_ref().is_some_and(|(t, _)| t == text) {
            return Ok(None);
        }
        let replacing = existing.map(|(_, sha)| sha);
        self.commit_file(branch, path, text, message, replacing.as_deref())
            .await
            .map(Some)
    }

    /// Rewrites the file at `path` on `branch` through `edit`, committing only
    /// when the text changes: the new commit's sha then. A file that is not
    /// there is left alone (None).
    pub async fn edit_file(
        &self,
        branch: &str,
        path: &str,
        edit: impl FnOnce(&str) -> String,
        message: &str,
    ) -> Result<Option<String>, GitHubError> {
        let Some((text, sha)) = self.file(path, Some(branch)).await? else {
            return Ok(None);
        };
        let edited = edit(&text);
        if edited == text {
            return Ok(None);
        }
        self.commit_file(branch, path, &edited, message, Some(&sha))
            .await
            .map(Some)
    }

    /// Every path (files and directories) of the tree at `commit`, in one
    /// request; None when GitHub cut the listing (a very large tree).
    pub async fn paths_at(
        &self,
        commit: &str,
    ) -> Result<Option<std::collections::HashSet<String>>, GitHubError> {
        let tree: answers::Tree = self
            .get(&format!("/git/trees/{}?recursive=1", enc(commit)))
            .await?;
        Ok((!tree.truncated).then(|| tree.tree.into_iter().map(|e| e.path).collect()))
    }

    /// Removes every file under `prefixes` from `branch` in one commit
    /// through the git data API (a tree read, a tree, a commit, a
    /// fast-forward of the branch): four requests however many files. Returns
    /// the new head, or None when there was nothing to remove.
    pub async fn remove_paths(
        &self,
        branch: &str,
        prefixes: &[&str],
        message: &str,
    ) -> Result<Option<String>, GitHubError> {
        let Some(head) = self.branch_sha(branch).await? else {
            return Ok(None);
        };
        let tree: answers::Tree = self.get(&format!("/git/trees/{head}?recursive=1")).await?;
        if tree.truncated {
            return Err(GitHubError::NeedsPerson(format!(
                "the tree of {branch} is too large for GitHub to list; remove {} by hand",
                prefixes.join(", ")
            )));
        }
        let gone: Vec<Value> = tree
            .tree
            .iter()
            .filter(|e| e.kind == "blob" && prefixes.iter().any(|p| e.path.starts_with(p)))
            .map(|e| json!({ "path": e.path, "mode": "100644", "type": "blob", "sha": null }))
            .collect();
        if gone.is_empty() {
            return Ok(None);
        }
        let new_tree: answers::Tree = self
            .post_again("/git/trees", json!({ "base_tree": tree.sha, "tree": gone }))
            .await?;
        let commit: answers::GitObject = self
            .post_again(
                "/git/commits",
                json!({ "message": message, "tree": new_tree.sha, "parents": [head] }),
            )
            .await?;
        // Fast-forward only: a branch that moved meanwhile is not rewound.
        let at = self.path(&format!("/git/refs/heads/{}", enc(branch)));
        self.gh
            .patch(
                self.installation,
                &at,
                &json!({ "sha": commit.sha, "force": false }),
            )
            .await?;
        Ok(Some(commit.sha))
    }

    /// A POST to the git data API, sent again when its answer was lost. A
    /// tree is named by its content, so making it twice makes one; a
    /// commit made twice leaves the first unreferenced, which nobody sees
    /// and GitHub collects. Nothing else may be posted so.
    async fn post_again<T: serde::de::DeserializeOwned>(
        &self,
        rest: &str,
        body: Value,
    ) -> Result<T, GitHubError> {
        debug_assert!(rest.starts_with("/git/trees") || rest.starts_with("/git/commits"));
        let mut unknown = 0;
        loop {
            match self.post(rest, body.clone()).await {
                Err(GitHubError::Transport { .. }) if unknown < 3 => unknown += 1,
                other => return other,
            }
        }
    }

    /// One `PUT /contents`: the new commit's sha. `replacing`: the blob sha of
    /// the file there now (GitHub refuses to overwrite without it).
    async fn commit_file(
        &self,
        branch: &str,
        path: &str,
        text: &str,
        message: &str,
        replacing: Option<&str>,
    ) -> Result<String, GitHubError> {
        let mut body = json!({
            "message": message,
            "branch": branch,
            "content": base64::engine::general_purpose::STANDARD.encode(text),
        });
        if let Some(sha) = replacing {
            body["sha"] = json!(sha);
        }
        let at = self.path(&format!("/contents/{}", enc(path)));
        let v = match self.gh.put(self.installation, &at, &body).await {
            Ok(reply) => reply.json(),
            // The client sends a PUT again after a server error; when the
            // first was made (its answer lost), the second is refused as
            // out of date. The file holding this text is that write done:
            // its commit is the branch's head, unless one came after it.
            Err(GitHubError::Http {
                status: 409 | 422, ..
            }) if self
                .file(path, Some(branch))
                .await?
                .is_some_and(|(t, _)| t == text) =>
            {
                return self.branch_sha(branch).await?.ok_or_else(|| {
                    GitHubError::NeedsPerson(format!("{branch} is gone after writing {path}"))
                });
            }
            Err(e) => return Err(e),
        };
        let made: answers::FileCommit = read(&format!("PUT {at}"), v)?;
        Ok(made.commit.sha)
    }

    /// Commits a new file (one request, where `put_file` first reads what is
    /// there); a file already there — a repeated effect — falls back to
    /// `put_file`. Returns the new commit's sha when one was made.
    pub async fn create_file(
        &self,
        branch: &str,
        path: &str,
        text: &str,
        message: &str,
    ) -> Result<Option<String>, GitHubError> {
        match self.commit_file(branch, path, text, message, None).await {
            Ok(sha) => Ok(Some(sha)),
            // Without the existing blob's sha GitHub refuses to overwrite.
            Err(GitHubError::Http {
                status: 409 | 422, ..
            }) => self.put_file(branch, path, text, message).await,
            Err(e) => Err(e),
        }
    }

    /// Commits on `head` since `base` as (sha, first line of message).
    pub async fn compare(
        &self,
        base: &str,
        head: &str,
    ) -> Result<Vec<(String, String)>, GitHubError> {
        let v: answers::Comparison = self
            .get(&format!("/compare/{}...{}", enc(base), enc(head)))
            .await?;
        Ok(v.commits
            .into_iter()
            .map(|c| {
                let first = c.commit.message.lines().next().unwrap_or("").to_string();
                (c.sha, first)
            })
            .collect())
    }

    /// The files `head` changed since `base` (three-dot, as GitHub compares).
    pub async fn changed_between(
        &self,
        base: &str,
        head: &str,
    ) -> Result<Vec<String>, GitHubError> {
        let v: answers::Comparison = self
            .get(&format!("/compare/{}...{}", enc(base), enc(head)))
            .await?;
        Ok(v.files.into_iter().map(|f| f.filename).collect())
    }

    /// The pull request from `head` (open or not), if there is one.
    pub async fn pull_for(&self, head: &str) -> Result<Option<PullRequest>, GitHubError> {
        // The open one, if any: a sprint done again after its merge has a
        // merged pull request besides.
        let mut pulls = self.pulls_for(head).await?;
        let open = pulls.iter().position(|p| p.state == "open").unwrap_or(0);
        Ok((!pulls.is_empty()).then(|| pulls.swap_remove(open)))
    }

    /// Every pull request from `head` (the sprint branch), open or not.
    pub async fn pulls_for(&self, head: &str) -> Result<Vec<PullRequest>, GitHubError> {
        let owner = self.name.split('/').next().unwrap_or("");
        let v: Vec<answers::Pull> = self
            .list(
                &format!(
                    "/pulls?state=all&per_page=100&head={}",
                    enc(&format!("{owner}:{head}"))
                ),
                None,
            )
            .await?;
        Ok(v.into_iter().map(PullRequest::from).collect())
    }

    /// The parents of a commit, first parent first; None when GitHub does
    /// not know the commit.
    pub async fn parents(&self, sha: &str) -> Result<Option<Vec<String>>, GitHubError> {
        match self
            .get::<answers::Commit>(&format!("/commits/{}", enc(sha)))
            .await
        {
            Ok(c) => Ok(Some(c.parents.into_iter().map(|p| p.sha).collect())),
            Err(GitHubError::Http {
                status: 404 | 422, ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn pull(&self, number: i64) -> Result<PullRequest, GitHubError> {
        Ok(self
            .get::<answers::Pull>(&format!("/pulls/{number}"))
            .await?
            .into())
    }

    /// Opens a pull request from `head`, or finds the one already open (one
    /// request when none is); `None` when GitHub opens none because `head` is
    /// missing or has no commits beyond `base`.
    pub async fn open_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<Option<PullRequest>, GitHubError> {
        let made = self
            .post::<answers::Pull>(
                "/pulls",
                json!({ "title": crate::text::inert_mentions(title), "head": head, "base": base, "body": fit(body, MAX_BODY_CHARS) }),
            )
            .await;
        match made {
            Ok(p) => Ok(Some(p.into())),
            Err(GitHubError::Http { status: 422, .. }) => self.pull_for(head).await,
            Err(e) => Err(e),
        }
    }

    /// Proposes `files` (path, text) in a pull request from `head` into the
    /// default branch: the branch is made from the default branch's head if
    /// missing, each file committed unless it is there already, and the
    /// pull request opened or found. Never a push to the default branch.
    pub async fn propose(
        &self,
        head: &str,
        files: &[(&str, &str)],
        title: &str,
        body: &str,
    ) -> Result<i64, GitHubError> {
        let base = self.default_branch().await?;
        let Some(at) = self.branch_sha(&base).await? else {
            return Err(GitHubError::NeedsPerson(format!(
                "the default branch {base} has no commit yet; push one, then ask again"
            )));
        };
        self.create_branch(head, &at).await?;
        for (path, text) in files {
            self.put_file(head, path, text, &format!("supervise: {title} ({path})"))
                .await?;
        }
        self.ensure_pull(head, &base, title, body).await
    }

    /// Opens a pull request unless one from `head` exists; returns its number.
    pub async fn ensure_pull(
        &self,
        head: &str,
        base: &str,
        title: &str,
        body: &str,
    ) -> Result<i64, GitHubError> {
        if let Some(p) = self.pull_for(head).await? {
            return Ok(p.number);
        }
        let made: answers::Pull = self
            .post(
                "/pulls",
                json!({ "title": crate::text::inert_mentions(title), "head": head, "base": base, "body": fit(body, MAX_BODY_CHARS) }),
            )
            .await?;
        Ok(made.number)
    }

    /// Whether a pull request merges cleanly, from the pull request itself (list
    /// items do not carry it), starting from `first` when the caller has just
    /// read it. GitHub computes it in the background and answers `null`
    /// meanwhile: asked a few times, then `None` (unknown).
    pub async fn mergeable(
        &self,
        number: i64,
        first: Option<&PullRequest>,
    ) -> Result<Option<bool>, GitHubError> {
        let mut known = first.cloned();
        for wait_ms in [0u64, 300, 700, 1500] {
            let p = match known.take() {
                Some(p) => p,
                None => {
                    tokio::time::sleep(std::time::Duration::from_millis(wait_ms)).await;
                    self.pull(number).await?
                }
            };
            if let Some(m) = p.mergeable {
                return Ok(Some(m));
            }
            if p.merged || p.state == "closed" {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Merges a pull request, at `sha` when given: GitHub refuses (409) if the
    /// head is no longer that commit.
    pub async fn merge(&self, number: i64, sha: Option<&str>) -> Result<Merge, GitHubError> {
        let mut body = json!({ "merge_method": "merge" });
        if let Some(sha) = sha {
            body["sha"] = json!(sha);
        }
        let r = self
            .gh
            .put(
                self.installation,
                &self.path(&format!("/pulls/{number}/merge")),
                &body,
            )
            .await;
        match r {
            Ok(answer) => {
                let at = format!("PUT {}", self.path(&format!("/pulls/{number}/merge")));
                let made: answers::MergeResult = read(&at, answer.json())?;
                Ok(Merge::Merged(Some(made.sha)))
            }
            Err(GitHubError::Http { status: 409, .. }) => Ok(Merge::HeadMoved),
            Err(GitHubError::Http { status: 405, .. }) => {
                // Already merged (a repeated effect) counts as done.
                Ok(if self.pull(number).await?.merged {
                    Merge::Merged(None)
                } else {
                    Merge::Conflict
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Each reviewer's latest review that counts (approved, changes
    /// requested or dismissed; a comment changes nothing), as GitHub counts
    /// them for a merge, in the order they were submitted.
    pub async fn latest_reviews(
        &self,
        number: i64,
    ) -> Result<Vec<(String, answers::Review)>, GitHubError> {
        let v: Vec<answers::Review> = self
            .list(&format!("/pulls/{number}/reviews?per_page=100"), None)
            .await?;
        let mut latest: Vec<(String, answers::Review)> = Vec::new();
        for r in v {
            let Some(user) = r.user.as_ref().map(|u| u.login.clone()) else {
                continue;
            };
            if !matches!(
                r.state.as_str(),
                "APPROVED" | "CHANGES_REQUESTED" | "DISMISSED"
            ) {
                continue;
            }
            latest.retain(|(login, _)| *login != user);
            latest.push((user, r));
        }
        Ok(latest)
    }

    /// The comments on lines of the diff that one review made.
    pub async fn review_comments(
        &self,
        number: i64,
        review: i64,
    ) -> Result<Vec<answers::ReviewComment>, GitHubError> {
        self.list(
            &format!("/pulls/{number}/reviews/{review}/comments?per_page=100"),
            None,
        )
        .await
    }

    /// Asks `logins` to review pull request `number` (again).
    pub async fn request_reviewers(
        &self,
        number: i64,
        logins: &[String],
    ) -> Result<(), GitHubError> {
        self.send(
            &format!("/pulls/{number}/requested_reviewers"),
            serde_json::json!({ "reviewers": logins }),
        )
        .await
    }

    /// The files a pull request changes and is left with (removed ones left out).
    pub async fn pull_files(&self, number: i64) -> Result<Vec<String>, GitHubError> {
        let v: Vec<answers::DiffEntry> = self
            .list(&format!("/pulls/{number}/files?per_page=100"), None)
            .await?;
        Ok(v.into_iter()
            .filter(|f| f.status != "removed")
            .map(|f| f.filename)
            .collect())
    }

    /// Check runs on a commit, from every app.
    pub async fn checks(&self, rev: &str) -> Result<Vec<Check>, GitHubError> {
        let v: Vec<answers::CheckRun> = self
            .list(
                &format!("/commits/{}/check-runs?per_page=100", enc(rev)),
                Some("check_runs"),
            )
            .await?;
        Ok(v.into_iter()
            .map(|c| {
                let (summary, text) = c.output.map(|o| (o.summary, o.text)).unwrap_or_default();
                Check {
                    id: c.id,
                    name: c.name,
                    details_url: c.details_url,
                    app_id: c.app.as_ref().and_then(|a| a.id),
                    app: c.app.and_then(|a| a.slug).unwrap_or_default(),
                    completed: c.status == "completed",
                    conclusion: c.conclusion,
                    external_id: c.external_id.unwrap_or_default(),
                    summary: summary.unwrap_or_default(),
                    text: text.unwrap_or_default(),
                }
            })
            .collect())
    }

    /// A check run's annotations: the first 50, which is all a prompt quotes.
    pub async fn annotations(&self, check: i64) -> Result<Vec<answers::Annotation>, GitHubError> {
        let path = self.path(&format!("/check-runs/{check}/annotations?per_page=50"));
        let reply = self.gh.get(self.installation, &path).await?;
        answers::read_list(&format!("GET {path}"), &reply.body, None)
    }

    /// An Actions job's log, or `None` when GitHub keeps none (expired, or
    /// not a job). GitHub answers with a redirect to a download that needs
    /// no token; the client follows it and drops the token on the way.
    pub async fn job_log(&self, job: i64) -> Result<Option<String>, GitHubError> {
        let path = self.path(&format!("/actions/jobs/{job}/logs"));
        match self.gh.get(self.installation, &path).await {
            Ok(reply) => Ok(Some(reply.body)),
            Err(GitHubError::Http {
                status: 404 | 410, ..
            }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Makes a check run. An attempt whose outcome is unknown (its answer
    /// was lost: GitHub may have made it) is followed by a look at the
    /// head's check runs for one of this name and external id before it is
    /// made again, so the trusted job that vouches for a record does not
    /// fail on a lost answer, nor make two.
    pub async fn create_check(&self, mut body: Value) -> Result<(), GitHubError> {
        for field in ["summary", "text"] {
            if let Some(t) = body["output"][field].as_str() {
                body["output"][field] = json!(fit(t, MAX_CHECK_CHARS));
            }
        }
        let name = body["name"].as_str().unwrap_or_default().to_string();
        let external = body["external_id"].as_str().unwrap_or_default().to_string();
        let head = body["head_sha"].as_str().unwrap_or_default().to_string();
        let mut tries = 0;
        loop {
            match self.send("/check-runs", body.clone()).await {
                Err(GitHubError::Transport { .. }) if tries < 3 && !head.is_empty() => {
                    tries += 1;
                    let made = self
                        .checks(&head)
                        .await?
                        .into_iter()
                        .any(|c| c.name == name && c.external_id == external);
                    if made {
                        return Ok(());
                    }
                }
                other => return other,
            }
        }
    }

    /// One issue: its number, id, title and body.
    /// A person's role on the repository (`role_name`: admin, maintain,
    /// write, triage, read or a custom role's name; `none` for a stranger,
    /// whom GitHub answers 404). An answer that is not a clear grant (a 422,
    /// another 4xx, an unreadable body) is `Ok(Err(why))`; server errors and
    /// rate limits are `Err`, to be tried again.
    pub async fn role(&self, login: &str) -> Result<Result<String, String>, GitHubError> {
        let rest = format!("/collaborators/{}/permission", enc(login));
        match self.get::<answers::CollaboratorPermission>(&rest).await {
            Ok(a) => Ok(Ok(a.role_name)),
            Err(GitHubError::Http { status: 404, .. }) => Ok(Ok("none".into())),
            Err(GitHubError::Http { status, body, .. }) if (400..500).contains(&status) => {
                Ok(Err(format!("GitHub answered {status}: {body}")))
            }
            Err(e @ GitHubError::Unexpected { .. }) => Ok(Err(e.to_string())),
            Err(e) => Err(e),
        }
    }

    pub async fn issue(&self, number: i64) -> Result<answers::Issue, GitHubError> {
        self.get(&format!("/issues/{number}")).await
    }

    pub async fn create_issue(
        &self,
        title: &str,
        body: &str,
        labels: &[&str],
    ) -> Result<(i64, IssueId), GitHubError> {
        let made: answers::Issue = self
            .post(
                "/issues",
                json!({ "title": crate::text::inert_mentions(title), "body": fit(body, MAX_BODY_CHARS), "labels": labels }),
            )
            .await?;
        Ok((made.number, made.id))
    }

    /// Issues (any state) carrying `label`, as (number, id, body).
    /// The issues the App itself opened with `label`: (number, id, body).
    /// Anyone who can label can label an issue; only the App's are its own.
    pub async fn own_issues_labelled(
        &self,
        label: &str,
    ) -> Result<Vec<(i64, IssueId, String)>, GitHubError> {
        let v: Vec<answers::Issue> = self
            .list(
                &format!("/issues?state=all&per_page=100&labels={}", enc(label)),
                None,
            )
            .await?;
        let mut own = Vec::new();
        for i in v {
            if self.gh.made_by_us(i.user.as_ref()).await? {
                own.push((i.number, i.id, i.body.unwrap_or_default()));
            }
        }
        Ok(own)
    }

    pub async fn add_sub_issue(&self, parent: i64, child: IssueId) -> Result<(), GitHubError> {
        match self
            .send(
                &format!("/issues/{parent}/sub_issues"),
                json!({ "sub_issue_id": child.0 }),
            )
            .await
        {
            Ok(()) => Ok(()),
            // 422 is GitHub's answer both to "already linked" (the repeated
            // effect is done) and to real refusals ("already has a parent"):
            // the parent's list of sub-issues tells them apart.
            Err(e @ GitHubError::Http { status: 422, .. }) => {
                let linked = self
                    .list::<answers::Issue>(
                        &format!("/issues/{parent}/sub_issues?per_page=100"),
                        None,
                    )
                    .await?
                    .iter()
                    .any(|i| i.id == child);
                if linked {
                    Ok(())
                } else {
                    Err(e)
                }
            }
            Err(e) => Err(e),
        }
    }

    pub async fn close_issue(&self, number: i64) -> Result<(), GitHubError> {
        self.gh
            .patch(
                self.installation,
                &self.path(&format!("/issues/{number}")),
                &json!({ "state": "closed", "state_reason": "completed" }),
            )
            .await
            .map(|_| ())
    }

    pub async fn add_labels(&self, number: i64, labels: &[&str]) -> Result<(), GitHubError> {
        self.send(
            &format!("/issues/{number}/labels"),
            json!({ "labels": labels }),
        )
        .await
    }

    /// Takes a label off an issue; one it does not carry is fine.
    pub async fn remove_label(&self, number: i64, label: &str) -> Result<(), GitHubError> {
        let path = self.path(&format!("/issues/{number}/labels/{}", enc(label)));
        match self.gh.delete(self.installation, &path).await {
            Ok(_) | Err(GitHubError::Http { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Comments on an issue as (id, body), optionally only since a time.
    pub async fn comments(
        &self,
        issue: i64,
        since: Option<&str>,
    ) -> Result<Vec<(i64, String)>, GitHubError> {
        Ok(self
            .comment_list(issue, since)
            .await?
            .into_iter()
            .map(|c| (c.id, c.body.unwrap_or_default()))
            .collect())
    }

    /// Every comment on an issue, optionally only since a time, as GitHub
    /// gives them (with their authors).
    async fn comment_list(
        &self,
        issue: i64,
        since: Option<&str>,
    ) -> Result<Vec<answers::Comment>, GitHubError> {
        let since = since
            .map(|s| format!("&since={}", enc(s)))
            .unwrap_or_default();
        self.list(
            &format!("/issues/{issue}/comments?per_page=100{since}"),
            None,
        )
        .await
    }

    pub async fn comment(&self, issue: i64, body: &str) -> Result<i64, GitHubError> {
        let made: answers::Comment = self
            .post(
                &format!("/issues/{issue}/comments"),
                json!({ "body": fit(body, MAX_BODY_CHARS) }),
            )
            .await?;
        Ok(made.id)
    }

    /// Reacts to a comment (`eyes`: seen, and being acted on). Reacting
    /// twice is harmless: GitHub answers with the reaction already there.
    pub async fn react(&self, comment: i64, content: &str) -> Result<(), GitHubError> {
        self.send(
            &format!("/issues/comments/{comment}/reactions"),
            json!({ "content": content }),
        )
        .await
    }

    /// The App's own comment on `issue` (since `since`) carrying `marker`:
    /// (id, body). Only the App's: anyone who can comment can write a
    /// marker, and one a stranger planted must not silence a reply, skip a
    /// notice or be edited as the status table.
    pub async fn marked(
        &self,
        issue: i64,
        since: Option<&str>,
        marker: &str,
    ) -> Result<Option<(i64, String)>, GitHubError> {
        for c in self.comment_list(issue, since).await? {
            let body = c.body.unwrap_or_default();
            if body.contains(marker) && self.gh.made_by_us(c.user.as_ref()).await? {
                return Ok(Some((c.id, body)));
            }
        }
        Ok(None)
    }

    /// Posts a comment unless one carrying `marker` is already on the issue.
    pub async fn comment_once(
        &self,
        issue: i64,
        since: Option<&str>,
        marker: &str,
        body: &str,
    ) -> Result<(), GitHubError> {
        self.comment_once_to(issue, since, marker, body, None).await
    }

    /// [`Self::comment_once`], opening with a mention of `login` when one is
    /// given: the one mention the App makes live (a repository's
    /// `mention: true`), put before the body `fit` has made inert, so nothing
    /// in the body pings.
    pub async fn comment_once_to(
        &self,
        issue: i64,
        since: Option<&str>,
        marker: &str,
        body: &str,
        login: Option<&str>,
    ) -> Result<(), GitHubError> {
        if self.marked(issue, since, marker).await?.is_some() {
            return Ok(());
        }
        let to = login.map(|l| format!("@{l} ")).unwrap_or_default();
        let text = fit(
            &format!("{body}\n\n{marker}"),
            MAX_BODY_CHARS - to.chars().count(),
        );
        let _: answers::Comment = self
            .post(
                &format!("/issues/{issue}/comments"),
                json!({ "body": format!("{to}{text}") }),
            )
            .await?;
        Ok(())
    }

    /// The comment carrying `marker`, edited to say `body` (unless it does
    /// already), or made if there is none.
    pub async fn upsert_comment(
        &self,
        issue: i64,
        since: Option<&str>,
        marker: &str,
        body: &str,
    ) -> Result<(), GitHubError> {
        let text = format!("{body}\n\n{marker}");
        match self.marked(issue, since, marker).await? {
            // Compared as GitHub holds it: the body as `fit` publishes it.
            Some((_, old)) if old == fit(&text, MAX_BODY_CHARS) => Ok(()),
            Some((id, _)) => self.edit_comment(id, &text).await,
            None => self.comment(issue, &text).await.map(|_| ()),
        }
    }

    pub async fn edit_comment(&self, id: i64, body: &str) -> Result<(), GitHubError> {
        self.gh
            .patch(
                self.installation,
                &self.path(&format!("/issues/comments/{id}")),
                &json!({ "body": fit(body, MAX_BODY_CHARS) }),
            )
            .await
            .map(|_| ())
    }

    /// Dispatches the workflow and returns its run (GitHub answers with the run's
    /// details when asked to).
    pub async fn dispatch(
        &self,
        workflow: &str,
        branch: &str,
        inputs: Value,
    ) -> Result<Option<(i64, String)>, GitHubError> {
        let path = self.path(&format!("/actions/workflows/{}/dispatches", enc(workflow)));
        let body = json!({ "ref": branch, "inputs": inputs, "return_run_details": true });
        let r = self.gh.post(self.installation, &path, &body).await?;
        // An older GitHub answers 204 with no body: the run is found by its name.
        if r.status == 204 || r.body.trim().is_empty() {
            return Ok(None);
        }
        let run: answers::DispatchedRun = read(&format!("POST {path}"), r.json())?;
        Ok(Some((run.workflow_run_id, run.html_url)))
    }

    /// Recent runs of a workflow (newest first), created at or after `since`.
    pub async fn runs(&self, workflow: &str, since: &str) -> Result<Vec<WorkflowRun>, GitHubError> {
        let v: Vec<answers::Run> = self
            .list(
                &format!(
                    "/actions/workflows/{}/runs?event=workflow_dispatch&per_page=100&created={}",
                    enc(workflow),
                    enc(&format!(">={since}"))
                ),
                Some("workflow_runs"),
            )
            .await?;
        Ok(v.into_iter().map(WorkflowRun::from).collect())
    }

    /// The newest runs a dispatch made of a workflow, newest first, a page
    /// of [`RUN_PAGE`] at a time until every run in `wanted` is among them (at most
    /// [`RUN_PAGES`] pages). The pages' addresses never change, so each is
    /// asked conditionally, and while no run of the repository changed GitHub
    /// answers 304, which costs nothing against the rate limit: one look
    /// answers for every run in flight of every operation of the repository.
    pub async fn recent_runs(
        &self,
        workflow: &str,
        wanted: &[i64],
    ) -> Result<Vec<WorkflowRun>, GitHubError> {
        let mut next = Some(self.path(&format!(
            "/actions/workflows/{}/runs?event=workflow_dispatch&per_page={RUN_PAGE}",
            enc(workflow)
        )));
        let mut runs: Vec<WorkflowRun> = Vec::new();
        for _ in 0..RUN_PAGES {
            let Some(path) = next.take() else { break };
            let reply = self.gh.get(self.installation, &path).await?;
            let page: Vec<answers::Run> =
                read_list(&format!("GET {path}"), &reply.body, Some("workflow_runs"))?;
            runs.extend(page.into_iter().map(WorkflowRun::from));
            if wanted.iter().all(|id| runs.iter().any(|r| r.id == *id)) {
                break;
            }
            next = reply.next;
        }
        Ok(runs)
    }

    pub async fn run(&self, id: i64) -> Result<Option<WorkflowRun>, GitHubError> {
        match self
            .get::<answers::Run>(&format!("/actions/runs/{id}"))
            .await
        {
            Ok(r) => Ok(Some(r.into())),
            Err(GitHubError::Http { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Cancels a run (force: even one that ignores the cancel). A run that has
    /// already finished is fine.
    pub async fn cancel(&self, id: i64, force: bool) -> Result<(), GitHubError> {
        let what = if force { "force-cancel" } else { "cancel" };
        match self
            .send(&format!("/actions/runs/{id}/{what}"), json!({}))
            .await
        {
            Ok(()) | Err(GitHubError::Http { status: 409, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_bodies_are_cut_to_githubs_limit_keeping_the_marker() {
        let long = format!("{}\n\n<!-- supervise:reply 7 -->", "é".repeat(70_000));
        let cut = fit(&long, MAX_BODY_CHARS);
        assert!(cut.chars().count() <= MAX_BODY_CHARS);
        assert!(
            cut.ends_with("<!-- supervise:reply 7 -->"),
            "the marker survives"
        );
        assert!(cut.contains("cut here"));
        assert_eq!(fit("short", 10), "short");
        let plain = fit(&"x".repeat(100), 40);
        assert!(plain.chars().count() <= 40, "{plain}");
    }
}
