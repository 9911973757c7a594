//! The webhook payloads the service acts on, as types. Only the fields used are
//! read; everything else GitHub sends is ignored.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    pull_request: Option<serde::de::IgnoredAny>,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// A `pull_request_review` event: a review submitted, edited or dismissed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewEvent {
    pub action: String,
    pub installation: Option<u64>,
    pub repo: String,
    pub number: i64,
    /// The pull request's head branch.
    pub head_ref: String,
    /// `approved`, `changes_requested`, `commented` or `dismissed`, in lower
    /// case (the webhook writes it so; the REST API in capitals).
    pub state: String,
    pub login: String,
    /// The review's id (0 where a payload leaves it out).
    #[serde(default)]
    pub id: i64,
    #[serde(default)]
    pub body: String,
    /// The head it reviewed.
    #[serde(default)]
    pub commit: String,
}

#[derive(Deserialize)]
struct RawReviewEvent {
    action: String,
    review: RawReview,
    pull_request: RawPull,
    repository: RawRepo,
    installation: Option<RawId>,
}

#[derive(Deserialize)]
struct RawReview {
    state: String,
    user: RawUser,
    #[serde(default)]
    id: i64,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    commit_id: Option<String>,
}

impl ReviewEvent {
    /// A `pull_request_review` payload; the error says which field is missing.
    pub fn parse(payload: &str) -> Result<ReviewEvent, String> {
        let r: RawReviewEvent = serde_json::from_str(payload)
            .map_err(|e| format!("not a pull_request_review payload: {e}"))?;
        Ok(ReviewEvent {
            action: r.action,
            installation: r.installation.map(|i| i.id),
            repo: r.repository.full_name,
            number: r.pull_request.number,
            head_ref: r.pull_request.head.branch,
            state: r.review.state.to_ascii_lowercase(),
            login: r.review.user.login,
            id: r.review.id,
            body: r.review.body.unwrap_or_default(),
            commit: r.review.commit_id.unwrap_or_default(),
        })
    }

    /// Whether it may move a sprint's pull request on: an approval or a
    /// request for changes submitted on one of the supervisor's own
    /// branches, or a review there dismissed.
    pub fn concerns_a_sprint(&self) -> bool {
        let moves = match self.action.as_str() {
            "submitted" => matches!(self.state.as_str(), "approved" | "changes_requested"),
            "dismissed" => true,
            _ => false,
        };
        moves && self.head_ref.starts_with("supervise/")
    }

    /// Whether it asks for changes on an operation's final pull request
    /// (from its integration branch).
    pub fn asks_changes_of_a_final_pull(&self) -> bool {
        self.action == "submitted"
            && self.state == "changes_requested"
            && self.head_ref.starts_with("supervise/")
            && self.head_ref.ends_with("/integration")
    }
}

/// A `check_suite` event: a suite of some App's checks on a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckSuiteEvent {
    pub action: String,
    pub installation: Option<u64>,
    pub repo: String,
    pub head_sha: String,
}

#[derive(Deserialize)]
struct RawCheckSuiteEvent {
    action: String,
    check_suite: RawSuite,
    repository: RawRepo,
    installation: Option<RawId>,
}

#[derive(Deserialize)]
struct RawSuite {
    head_sha: String,
}

impl CheckSuiteEvent {
    /// Whether an operation can learn anything from it: only a finished
    /// suite says how CI went.
    pub fn may_matter(&self) -> bool {
        self.action == "completed"
    }

    /// A `check_suite` payload; the error says which field is missing.
    pub fn parse(payload: &str) -> Result<CheckSuiteEvent, String> {
        let r: RawCheckSuiteEvent =
            serde_json::from_str(payload).map_err(|e| format!("not a check_suite payload: {e}"))?;
        Ok(CheckSuiteEvent {
            action: r.action,
            installation: r.installation.map(|i| i.id),
            repo: r.repository.full_name,
            head_sha: r.check_suite.head_sha,
        })
    }
}

/// A `workflow_run` event: the run it is about, read as the REST answer for a
/// run is (the webhook carries the same object).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkflowRunEvent {
    /// `requested`, `in_progress` or `completed`.
    pub action: String,
    pub installation: Option<u64>,
    pub run: crate::github::repo::WorkflowRun,
}

impl WorkflowRunEvent {
    /// A `workflow_run` payload; the error says what is missing.
    pub fn parse(payload: &str) -> Result<WorkflowRunEvent, String> {
        #[derive(Deserialize)]
        struct Raw {
            action: String,
            workflow_run: crate::github::answers::Run,
            installation: Option<RawId>,
        }
        let r: Raw = serde_json::from_str(payload)
            .map_err(|e| format!("not a workflow_run payload: {e}"))?;
        Ok(WorkflowRunEvent {
            action: r.action,
            installation: r.installation.map(|i| i.id),
            run: r.workflow_run.into(),
        })
    }
}

/// A `workflow_dispatch` event (the Action's door): who dispatched it, in
/// which repository, and the inputs the supervisor reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchEvent {
    pub repo: String,
    pub sender: String,
    /// The command's text (`start`, `solve debug-only`), trimmed; `None` when
    /// empty or absent (the run only reconciles).
    pub command: Option<String>,
    /// The issue input as given: a number, `#12`, or absent.
    pub issue: Option<i64>,
    /// The plan's path for `start`, trimmed; `None` when empty.
    pub plan: Option<String>,
}

#[derive(Deserialize)]
struct RawDispatch {
    #[serde(default)]
    inputs: Option<serde_json::Map<String, serde_json::Value>>,
    repository: RawRepo,
    sender: RawUser,
}

impl DispatchEvent {
    /// A `workflow_dispatch` payload; the error says which field is missing.
    /// Inputs arrive as strings from the Actions tab and may be numbers from
    /// the REST API: both are read.
    pub fn parse(payload: &str) -> Result<DispatchEvent, String> {
        let r: RawDispatch = serde_json::from_str(payload)
            .map_err(|e| format!("not a workflow_dispatch payload: {e}"))?;
        let inputs = r.inputs.unwrap_or_default();
        let text = |k: &str| {
            inputs
                .get(k)
                .and_then(|v| v.as_str())
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let issue = match inputs.get("issue") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::Number(n)) => n.as_i64(),
            Some(serde_json::Value::String(s)) if s.trim().is_empty() => None,
            Some(serde_json::Value::String(s)) => Some(
                s.trim()
                    .trim_start_matches('#')
                    .parse()
                    .map_err(|_| format!("the `issue` input `{s}` is not an issue number"))?,
            ),
            Some(other) => {
                return Err(format!(
                    "the `issue` input `{other}` is not an issue number"
                ))
            }
        };
        Ok(DispatchEvent {
            repo: r.repository.full_name,
            sender: r.sender.login,
            command: text("command"),
            issue,
            plan: text("plan"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{DispatchEvent, WorkflowRunEvent};

    fn dispatch(inputs: &str) -> Result<DispatchEvent, String> {
        DispatchEvent::parse(&format!(
            r#"{{"inputs":{inputs},"repository":{{"full_name":"o/r"}},"sender":{{"login":"ann"}}}}"#
        ))
    }

    #[test]
    fn a_dispatch_reads_its_inputs_as_the_actions_tab_and_the_api_give_them() {
        let tab = dispatch(r##"{"command":" start ","issue":"#12","plan":" "}"##).unwrap();
        assert_eq!(tab.command.as_deref(), Some("start"));
        assert_eq!(tab.issue, Some(12));
        assert_eq!(tab.plan, None, "an empty plan input is no plan");
        assert_eq!((tab.repo.as_str(), tab.sender.as_str()), ("o/r", "ann"));
        assert_eq!(dispatch(r#"{"issue":7}"#).unwrap().issue, Some(7));
        let bare = dispatch("null").unwrap();
        assert_eq!((bare.command, bare.issue), (None, None));
        let wrong = dispatch(r#"{"issue":"twelve"}"#).unwrap_err();
        assert!(wrong.contains("`twelve` is not an issue number"), "{wrong}");
        assert!(
            DispatchEvent::parse(r#"{"inputs":{}}"#).is_err(),
            "no repository"
        );
    }

    #[test]
    fn a_workflow_run_event_keeps_its_action_and_run() {
        let ev = WorkflowRunEvent::parse(
            r#"{"action":"completed","workflow_run":{"id":5,"display_title":"supervise d/1","status":"completed","conclusion":"success","html_url":"https://x/5"}}"#,
        )
        .unwrap();
        assert_eq!((ev.action.as_str(), ev.run.id), ("completed", 5));
        assert_eq!(ev.run.conclusion.as_deref(), Some("success"));
        assert!(WorkflowRunEvent::parse(r#"{"action":"completed"}"#).is_err());
    }
}
