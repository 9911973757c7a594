//! A webhook delivery as one type. Both doors turn `X-GitHub-Event` and the
//! body into an [`Event`] once, where they receive it (the service's intake,
//! the Action's event file); everything after matches on the enum, never on
//! the event's name, and never reads GitHub's body again.
//!
//! The service stores the event in its own small form ([`Event::stored`]):
//! the worker that carries it out reads that, not GitHub's payload (a comment's
//! payload is ~10 KB of repository and user objects; what is acted on is a
//! few hundred bytes).

use super::payload::{
    CheckSuiteEvent, CommentEvent, PullRequestEvent, ReviewEvent, WorkflowRunEvent,
};
use serde::{Deserialize, Serialize};

/// The events the supervisor acts on.
#[derive(Debug, Clone, Serialize, Deserialize)]
// A key GitHub's payloads never carry: a stored event is told apart from a
// payload stored raw by a version before this one.
#[serde(tag = "supervise_event", rename_all = "snake_case")]
pub enum Event {
    IssueComment(CommentEvent),
    WorkflowRun(WorkflowRunEvent),
    PullRequest(PullRequestEvent),
    PullRequestReview(ReviewEvent),
    CheckSuite(CheckSuiteEvent),
}

/// Why a delivery cannot be acted on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unread {
    /// An event the supervisor does not act on (acknowledged and dropped).
    #[error("the supervisor does not act on `{0}` events")]
    NotHandled(String),
    /// A handled event whose body lacks what is read of it.
    #[error("{0}")]
    Unusable(String),
}

impl Event {
    /// The names of the events read here (`X-GitHub-Event`): the App's
    /// manifest subscribes to these, and the service stores only them.
    pub const NAMES: &'static [&'static str] = &[
        "issue_comment",
        "workflow_run",
        "pull_request",
        "pull_request_review",
        "check_suite",
    ];

    /// Reads a delivery from its event name and GitHub's body: the one place
    /// an event's name decides anything.
    pub fn read(name: &str, payload: &str) -> Result<Event, Unread> {
        let unusable = Unread::Unusable;
        match name {
            "issue_comment" => CommentEvent::parse(payload)
                .map(Event::IssueComment)
                .map_err(unusable),
            "workflow_run" => WorkflowRunEvent::parse(payload)
                .map(Event::WorkflowRun)
                .map_err(unusable),
            "pull_request" => PullRequestEvent::parse(payload)
                .map(Event::PullRequest)
                .map_err(unusable),
            "pull_request_review" => ReviewEvent::parse(payload)
                .map(Event::PullRequestReview)
                .map_err(unusable),
            "check_suite" => CheckSuiteEvent::parse(payload)
                .map(Event::CheckSuite)
                .map_err(unusable),
            other => Err(Unread::NotHandled(other.chars().take(60).collect())),
        }
    }

    /// Its name, as GitHub calls it.
    pub fn name(&self) -> &'static str {
        match self {
            Event::IssueComment(_) => "issue_comment",
            Event::WorkflowRun(_) => "workflow_run",
            Event::PullRequest(_) => "pull_request",
            Event::PullRequestReview(_) => "pull_request_review",
            Event::CheckSuite(_) => "check_suite",
        }
    }

    /// The App installation it was delivered for (none with a token).
    pub fn installation(&self) -> Option<u64> {
        match self {
            Event::IssueComment(e) => e.installation,
            Event::WorkflowRun(e) => e.installation,
            Event::PullRequest(e) => e.installation,
            Event::PullRequestReview(e) => e.installation,
            Event::CheckSuite(e) => e.installation,
        }
    }

    /// What makes two deliveries the same news, whatever their delivery ids:
    /// GitHub may send one event twice under two ids (a redelivery by hand,
    /// a retry of a timed-out one), and a command must act once.
    pub fn dedupe_key(&self) -> Option<String> {
        match self {
            Event::IssueComment(e) => Some(format!("comment:{}:{}", e.comment_id, e.action)),
            Event::WorkflowRun(e) => Some(format!("run:{}:{}", e.run.id, e.action)),
            Event::PullRequest(_) | Event::PullRequestReview(_) | Event::CheckSuite(_) => None,
        }
    }

    /// The form the service stores: its own, read back by [`Event::from_stored`].
    pub fn stored(&self) -> String {
        // Serializing plain structs of strings and numbers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A stored delivery read back: the form [`Event::stored`] wrote, or
    /// GitHub's payload as a version before this one stored it.
    pub fn from_stored(name: &str, text: &str) -> Result<Event, Unread> {
        if text.contains("\"supervise_event\"") {
            if let Ok(ev) = serde_json::from_str(text) {
                return Ok(ev);
            }
        }
        Event::read(name, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMENT: &str = r#"{"action":"created","installation":{"id":7},
        "repository":{"full_name":"o/r","owner":{"login":"o"}},
        "issue":{"number":3,"pull_request":null},
        "comment":{"id":11,"body":"/supervise status","created_at":"2026-01-01T00:00:00Z",
                   "user":{"login":"ann","type":"User"}}}"#;

    const RUN: &str = r#"{"action":"completed","installation":{"id":7},
        "workflow_run":{"id":5,"display_title":"supervise d/1","status":"completed",
                        "conclusion":"success","html_url":"https://x/5"}}"#;

    #[test]
    fn a_delivery_is_read_once_and_its_stored_form_reads_back_the_same() {
        for (name, body) in [("issue_comment", COMMENT), ("workflow_run", RUN)] {
            let ev = Event::read(name, body).unwrap();
            assert_eq!(ev.name(), name);
            assert_eq!(ev.installation(), Some(7));
            let back = Event::from_stored(name, &ev.stored()).unwrap();
            assert_eq!(format!("{back:?}"), format!("{ev:?}"));
            assert!(ev.stored().len() < body.len(), "{}", ev.stored());
        }
        // A row stored raw by an older version still reads.
        let old = Event::from_stored("issue_comment", COMMENT).unwrap();
        assert_eq!(old.dedupe_key().as_deref(), Some("comment:11:created"));
        let run = Event::read("workflow_run", RUN).unwrap();
        assert_eq!(run.dedupe_key().as_deref(), Some("run:5:completed"));
    }

    /// The App subscribes to exactly the events read here: one more in the
    /// manifest would be stored for nothing, one fewer never arrives.
    #[test]
    fn the_manifest_subscribes_to_the_events_read_here() {
        let manifest: serde_json::Value =
            serde_json::from_str(include_str!("../../deploy/app-manifest.json")).unwrap();
        let mut subscribed: Vec<&str> = manifest["default_events"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e.as_str())
            .collect();
        let mut read = Event::NAMES.to_vec();
        subscribed.sort();
        read.sort();
        assert_eq!(subscribed, read);
    }

    #[test]
    fn an_unhandled_or_unusable_delivery_says_which() {
        assert_eq!(
            Event::read("star", "{}").unwrap_err(),
            Unread::NotHandled("star".into())
        );
        for name in Event::NAMES {
            match Event::read(name, r#"{"action":"created"}"#) {
                Err(Unread::Unusable(why)) => assert!(why.contains(name), "{name}: {why}"),
                other => panic!("{name}: {other:?}"),
            }
        }
        // A stored form that does not read falls back to GitHub's, and says so.
        assert!(matches!(
            Event::from_stored("issue_comment", r#"{"supervise_event":"nonsense"}"#),
            Err(Unread::Unusable(_))
        ));
    }
}
