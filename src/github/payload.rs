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
            repo: r.repository.full_name,
            head_sha: r.check_suite.head_sha,
        })
    }
}

/// A `workflow_run` event: the run it is about, read as the REST answer for a
/// run is (the webhook carries the same object).
#[derive(Debug, Clone)]
pub struct WorkflowRunEvent {
    /// `requested`, `in_progress` or `completed`.
    pub action: String,
    pub run: crate::github::repo::WorkflowRun,
}

impl WorkflowRunEvent {
    /// A `workflow_run` payload; the error says what is missing.
    pub fn parse(payload: &str) -> Result<WorkflowRunEvent, String> {
        #[derive(Deserialize)]
        struct Raw {
            action: String,
            workflow_run: serde_json::Value,
        }
        let r: Raw = serde_json::from_str(payload)
            .map_err(|e| format!("not a workflow_run payload: {e}"))?;
        crate::github::repo::WorkflowRun::from_payload(&r.workflow_run)
            .map(|run| WorkflowRunEvent {
                action: r.action,
                run,
            })
            .map_err(|e| e.to_string())
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

/// What intake reads of any delivery before storing it: the installation, the
/// action, and the ids its dedupe key is made of. Each is `None` unless it is
/// there with the expected type (`installation.id` an integer, say), as
/// indexing a `serde_json::Value` would give; the rest of the body is skipped
/// without being built, so a 10 KB payload costs a scan, not a tree.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeliveryKeys {
    pub action: Option<String>,
    pub installation: Option<i64>,
    pub workflow_run: Option<i64>,
    pub comment: Option<i64>,
}

impl DeliveryKeys {
    /// `Err` only when the body is not JSON.
    pub fn read(body: &[u8]) -> Result<DeliveryKeys, serde_json::Error> {
        serde_json::from_slice(body)
    }
}

/// The deserializing side of [`DeliveryKeys`]: one visitor that says what
/// kind of value it met, reading only what the keys need of it.
mod keys {
    use super::DeliveryKeys;
    use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::borrow::Cow;
    use std::fmt;

    /// A value as the keys see it.
    enum Probe {
        /// An integer that fits an `i64`.
        Int(i64),
        Str(String),
        /// An object: its `id`, if that is such an integer (a key given twice
        /// counts as its last, as in a `Value`).
        Object {
            id: Option<i64>,
        },
        /// Anything else, skipped.
        Other,
    }

    impl<'de> Deserialize<'de> for Probe {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(ProbeVisitor)
        }
    }

    struct ProbeVisitor;

    impl<'de> Visitor<'de> for ProbeVisitor {
        type Value = Probe;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_i64<E>(self, v: i64) -> Result<Probe, E> {
            Ok(Probe::Int(v))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Probe, E> {
            Ok(i64::try_from(v).map_or(Probe::Other, Probe::Int))
        }
        fn visit_str<E>(self, v: &str) -> Result<Probe, E> {
            Ok(Probe::Str(v.to_string()))
        }
        fn visit_f64<E>(self, _: f64) -> Result<Probe, E> {
            Ok(Probe::Other)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Probe, E> {
            Ok(Probe::Other)
        }
        fn visit_unit<E>(self) -> Result<Probe, E> {
            Ok(Probe::Other)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Probe, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Probe::Other)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Probe, A::Error> {
            let mut id = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == "id" {
                    id = match map.next_value::<Probe>()? {
                        Probe::Int(v) => Some(v),
                        _ => None,
                    };
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Probe::Object { id })
        }
    }

    impl<'de> Deserialize<'de> for DeliveryKeys {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = DeliveryKeys;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a JSON document")
                }
                fn visit_map<A: MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<DeliveryKeys, A::Error> {
                    let mut k = DeliveryKeys::default();
                    let id = |p: Probe| match p {
                        Probe::Object { id } => id,
                        _ => None,
                    };
                    while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                        match &*key {
                            "action" => {
                                k.action = match map.next_value::<Probe>()? {
                                    Probe::Str(s) => Some(s),
                                    _ => None,
                                }
                            }
                            "installation" => k.installation = id(map.next_value()?),
                            "workflow_run" => k.workflow_run = id(map.next_value()?),
                            "comment" => k.comment = id(map.next_value()?),
                            _ => {
                                map.next_value::<IgnoredAny>()?;
                            }
                        }
                    }
                    Ok(k)
                }
                // Any other document is valid JSON with none of the keys.
                fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<DeliveryKeys, A::Error> {
                    ProbeVisitor.visit_seq(seq).map(|_| DeliveryKeys::default())
                }
                fn visit_str<E>(self, _: &str) -> Result<DeliveryKeys, E> {
                    Ok(DeliveryKeys::default())
                }
                fn visit_i64<E>(self, _: i64) -> Result<DeliveryKeys, E> {
                    Ok(DeliveryKeys::default())
                }
                fn visit_u64<E>(self, _: u64) -> Result<DeliveryKeys, E> {
                    Ok(DeliveryKeys::default())
                }
                fn visit_f64<E>(self, _: f64) -> Result<DeliveryKeys, E> {
                    Ok(DeliveryKeys::default())
                }
                fn visit_bool<E>(self, _: bool) -> Result<DeliveryKeys, E> {
                    Ok(DeliveryKeys::default())
                }
                fn visit_unit<E>(self) -> Result<DeliveryKeys, E> {
                    Ok(DeliveryKeys::default())
                }
            }
            d.deserialize_any(V)
        }
    }
}

#[cfg(test)]
mod delivery_keys_tests {
    use super::DeliveryKeys;
    use proptest::prelude::*;
    use serde_json::Value;

    /// What indexing a parsed `Value` gives: the reference the keys are held to.
    fn by_value(v: &Value) -> DeliveryKeys {
        DeliveryKeys {
            action: v["action"].as_str().map(str::to_string),
            installation: v["installation"]["id"].as_i64(),
            workflow_run: v["workflow_run"]["id"].as_i64(),
            comment: v["comment"]["id"].as_i64(),
        }
    }

    fn json() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("id".to_string()),
            Just("action".to_string()),
            Just("installation".to_string()),
            Just("workflow_run".to_string()),
            Just("comment".to_string()),
            "[a-z]{1,3}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-1e6f64..1e6).prop_map(Value::from),
            "[a-z\"\\\\é]{0,4}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 40, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn the_keys_are_what_indexing_the_parsed_value_gives(v in json()) {
            let text = serde_json::to_vec(&v).unwrap();
            prop_assert_eq!(DeliveryKeys::read(&text).unwrap(), by_value(&v));
        }
    }

    #[test]
    fn repeated_keys_count_as_their_last_and_bad_json_is_an_error() {
        let text = br#"{"action":"a","action":"created","comment":{"id":1,"id":2},"installation":{"id":"7"}}"#;
        let v: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(DeliveryKeys::read(text).unwrap(), by_value(&v));
        assert_eq!(DeliveryKeys::read(text).unwrap().comment, Some(2));
        assert!(DeliveryKeys::read(b"{\"action\":").is_err());
        // What a parsed Value refuses, the keys refuse too, even where they
        // skip: a raw control character in a string. (Invalid UTF-8 in a
        // skipped string is not looked at: intake checks the whole body.)
        for bad in [&b"{\"x\":\"a\x00b\"}"[..], &b"{\"x\":[\"\x01\"]}"[..]] {
            assert!(serde_json::from_slice::<Value>(bad).is_err());
            assert!(
                DeliveryKeys::read(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(DeliveryKeys::read(b"{} trailing").is_err());
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
