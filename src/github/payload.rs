//! The webhook payloads the service acts on, as types. Only the fields used are
//! read; everything else GitHub sends is ignored.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentEvent {
    pub action: String,
    pub installation: Option<u64>,
    /// `owner/name`.
    pub repo: String,
    pub issue: i64,
    pub is_pull_request: bool,
    pub comment_id: i64,
    pub body: String,
    /// When the comment was made (ISO 8601), if the payload says.
    pub created_at: Option<String>,
    pub login: String,
    /// `User`, `Bot` or `Organization`.
    pub kind: String,
}

#[derive(Deserialize)]
struct Raw {
    action: String,
    issue: RawIssue,
    comment: RawComment,
    repository: RawRepo,
    installation: Option<RawId>,
}

#[derive(Deserialize)]
struct RawIssue {
    number: i64,
    pull_request: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawComment {
    id: i64,
    body: Option<String>,
    created_at: Option<String>,
    user: RawUser,
}

#[derive(Deserialize)]
struct RawUser {
    login: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Deserialize)]
struct RawRepo {
    full_name: String,
}

#[derive(Deserialize)]
struct RawId {
    id: u64,
}

impl CommentEvent {
    /// An `issue_comment` payload; the error says which field is missing.
    pub fn parse(payload: &str) -> Result<CommentEvent, String> {
        let r: Raw = serde_json::from_str(payload)
            .map_err(|e| format!("not an issue_comment payload: {e}"))?;
        Ok(CommentEvent {
            action: r.action,
            installation: r.installation.map(|i| i.id),
            repo: r.repository.full_name,
            issue: r.issue.number,
            is_pull_request: r.issue.pull_request.is_some(),
            comment_id: r.comment.id,
            body: r.comment.body.unwrap_or_default(),
            created_at: r.comment.created_at,
            login: r.comment.user.login,
            kind: r.comment.user.kind.unwrap_or_else(|| "User".into()),
        })
    }
}

/// A `pull_request` event: which pull request, at which head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestEvent {
    pub action: String,
    pub installation: Option<u64>,
    pub repo: String,
    pub number: i64,
    pub head_sha: String,
    /// The head branch's name.
    pub head_ref: String,
}

#[derive(Deserialize)]
struct RawPullEvent {
    action: String,
    pull_request: RawPull,
    repository: RawRepo,
    installation: Option<RawId>,
}

#[derive(Deserialize)]
struct RawPull {
    number: i64,
    head: RawHead,
}

#[derive(Deserialize)]
struct RawHead {
    sha: String,
    #[serde(rename = "ref")]
    branch: String,
}

impl PullRequestEvent {
    /// A `pull_request` payload; the error says which field is missing.
    pub fn parse(payload: &str) -> Result<PullRequestEvent, String> {
        let r: RawPullEvent = serde_json::from_str(payload)
            .map_err(|e| format!("not a pull_request payload: {e}"))?;
        Ok(PullRequestEvent {
            action: r.action,
            installation: r.installation.map(|i| i.id),
            repo: r.repository.full_name,
            number: r.pull_request.number,
            head_sha: r.pull_request.head.sha,
            head_ref: r.pull_request.head.branch,
        })
    }

    /// Whether the pull request's content changed (opened, pushed to,
    /// reopened) on a branch of people's: the supervisor's own sprint and
    /// integration branches (`supervise/…`) are verified by their own check
    /// runs, and looking at each of their pushes would cost a request apiece.
    pub fn worth_checking(&self) -> bool {
        matches!(self.action.as_str(), "opened" | "synchronize" | "reopened")
            && !self.head_ref.starts_with("supervise/")
    }
}

/// A `check_suite` event: a suite of some App's checks on a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSuiteEvent {
    pub action: String,
    pub repo: String,
    pub head_sha: String,
}

#[derive(Deserialize)]
struct RawCheckSuiteEvent {
    action: String,
    check_suite: RawSuite,
    repository: RawRepo,
}

#[derive(Deserialize)]
struct RawSuite {
    head_sha: String,
}

impl CheckSuiteEvent {
    /// A `check_suite` payload; the error says which field is missing.
    pub fn parse(payload: &str) -> Result<CheckSuiteEvent, String> {
        let r: RawCheckSuiteEvent =
            serde_json::from_str(payload).map_err(|e| format!("not a check_suite payload: {e}"))?;
        Ok(CheckSuiteEvent {
            action: r.action,
            repo: r.repository.full_name,
            head_sha: r.check_suite.head_sha,
        })
    }
}
