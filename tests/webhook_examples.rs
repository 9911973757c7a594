//! GitHub's own example payloads (npm `@octokit/webhooks-examples`, installed by
//! `scripts/test` into target/npm) go through the service's parser: every
//! `issue_comment` example must parse, and the fields the service uses must be
//! the ones in the example. Few examples carry an `installation`; one is added.

use supervise::github::payload::CommentEvent;

fn examples() -> serde_json::Value {
    let path = std::env::var("WEBHOOK_EXAMPLES").unwrap_or_else(|_| {
        format!(
            "{}/target/npm/node_modules/@octokit/webhooks-examples/api.github.com/index.json",
            env!("CARGO_MANIFEST_DIR")
        )
    });
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}; run `npm install --prefix target/npm @octokit/webhooks-examples@7` (scripts/test does)"));
    serde_json::from_str(&text).unwrap()
}

/// GitHub's examples of one event.
fn examples_of(event: &str) -> Vec<serde_json::Value> {
    let all = examples();
    let entry = all
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == event)
        .unwrap_or_else(|| panic!("{event} examples"));
    entry["examples"].as_array().unwrap().clone()
}

#[test]
fn every_issue_comment_example_parses() {
    let list = examples_of("issue_comment");
    assert!(
        list.len() >= 3,
        "expected several examples, found {}",
        list.len()
    );
    let mut actions = std::collections::BTreeSet::new();
    for (i, ex) in list.iter().enumerate() {
        let mut ex = ex.clone();
        ex["installation"] = serde_json::json!({ "id": 99 });
        let ev =
            CommentEvent::parse(&ex.to_string()).unwrap_or_else(|e| panic!("example {i}: {e}"));
        assert_eq!(ev.installation, Some(99));
        assert_eq!(ev.comment_id, ex["comment"]["id"].as_i64().unwrap());
        assert_eq!(ev.repo, ex["repository"]["full_name"].as_str().unwrap());
        assert_eq!(ev.issue, ex["issue"]["number"].as_i64().unwrap());
        assert_eq!(ev.login, ex["comment"]["user"]["login"].as_str().unwrap());
        assert_eq!(
            ev.is_pull_request,
            ex["issue"].get("pull_request").is_some()
        );
        actions.insert(ev.action);
    }
    assert!(
        actions.contains("created") && actions.contains("edited") && actions.contains("deleted"),
        "{actions:?}"
    );
}

/// The fields the service reads of a `check_suite` event (a verification
/// waiting for CI goes on when one completes) are in GitHub's examples.
#[test]
fn every_check_suite_example_parses() {
    let list = examples_of("check_suite");
    assert!(!list.is_empty());
    for (i, ex) in list.iter().enumerate() {
        let ev = supervise::github::payload::CheckSuiteEvent::parse(&ex.to_string())
            .unwrap_or_else(|e| panic!("example {i}: {e}"));
        assert_eq!(ev.repo, ex["repository"]["full_name"].as_str().unwrap());
        assert_eq!(ev.head_sha, ex["check_suite"]["head_sha"].as_str().unwrap());
        assert_eq!(ev.action, ex["action"].as_str().unwrap());
    }
}

/// A review's fields the service reads (an approval lets a sprint merge at
/// once) are in GitHub's examples of `pull_request_review`.
#[test]
fn every_pull_request_review_example_parses() {
    let list = examples_of("pull_request_review");
    assert!(!list.is_empty());
    for (i, ex) in list.iter().enumerate() {
        let ev = supervise::github::payload::ReviewEvent::parse(&ex.to_string())
            .unwrap_or_else(|e| panic!("example {i}: {e}"));
        assert_eq!(ev.repo, ex["repository"]["full_name"].as_str().unwrap());
        assert_eq!(ev.number, ex["pull_request"]["number"].as_i64().unwrap());
        assert_eq!(
            ev.state,
            ex["review"]["state"].as_str().unwrap().to_ascii_lowercase()
        );
        assert_eq!(ev.login, ex["review"]["user"]["login"].as_str().unwrap());
    }
}

#[test]
fn other_events_are_not_mistaken_for_comments() {
    let all = examples();
    for name in ["issues", "push", "workflow_run", "pull_request"] {
        let Some(entry) = all.as_array().unwrap().iter().find(|e| e["name"] == name) else {
            continue;
        };
        for ex in entry["examples"].as_array().unwrap() {
            assert!(
                CommentEvent::parse(&ex.to_string()).is_err(),
                "a {name} payload parsed as a comment"
            );
        }
    }
}
