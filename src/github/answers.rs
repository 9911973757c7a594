//! GitHub's answers, as the fields the supervisor reads. Each struct names only
//! what is used; a field GitHub's description marks required is required here,
//! so an answer without it is an error at the edge ([`GitHubError::Unexpected`])
//! instead of a silent default deep inside. Nullable fields are `Option`.

use super::GitHubError;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// An issue's database id — what `sub_issue_id` takes — as opposed to its
/// number in the repository, which every other issue path takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(transparent)]
pub struct IssueId(pub i64);

/// Reads one answer (or one item of a list) into `T`.
pub fn read<T: DeserializeOwned>(what: &str, v: serde_json::Value) -> Result<T, GitHubError> {
    serde_json::from_value(v).map_err(|e| GitHubError::Unexpected {
        what: what.to_string(),
        message: e.to_string(),
    })
}

/// Reads one page of a list into `T`s straight from the answer's text: the
/// answer's array, or with `key` the array under that key (`check_runs`,
/// `workflow_runs`). GitHub's items carry far more than is read (a workflow
/// run carries its repository twice over); read through a `Value`, a page of
/// 100 runs held every field of every run at once, and the service reads
/// such a page whenever a repository's runs change.
pub fn read_list<T: DeserializeOwned>(
    what: &str,
    body: &str,
    key: Option<&str>,
) -> Result<Vec<T>, GitHubError> {
    let mut de = serde_json::Deserializer::from_str(body);
    let list = serde::de::DeserializeSeed::deserialize(
        list::Under::<T> {
            key,
            item: std::marker::PhantomData,
        },
        &mut de,
    )
    .and_then(|list| de.end().map(|()| list));
    match list {
        Ok(Some(items)) => Ok(items),
        Ok(None) => Err(GitHubError::Unexpected {
            what: what.to_string(),
            message: format!(
                "expected a list{}",
                key.map(|k| format!(" under `{k}`")).unwrap_or_default()
            ),
        }),
        Err(e) => Err(GitHubError::Unexpected {
            what: what.to_string(),
            message: e.to_string(),
        }),
    }
}

/// The deserializing side of [`read_list`]: the list, at the top or under
/// one key of an object whose other keys are skipped unread.
mod list {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
    use serde::Deserialize;
    use std::fmt;
    use std::marker::PhantomData;

    pub(super) struct Under<'k, T> {
        pub key: Option<&'k str>,
        pub item: PhantomData<T>,
    }

    impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Under<'_, T> {
        /// `None`: an object without the key.
        type Value = Option<Vec<T>>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            match self.key {
                None => Vec::<T>::deserialize(d).map(Some),
                Some(key) => d.deserialize_map(self::Field {
                    key,
                    item: PhantomData,
                }),
            }
        }
    }

    struct Field<'k, T> {
        key: &'k str,
        item: PhantomData<T>,
    }

    impl<'de, T: Deserialize<'de>> Visitor<'de> for Field<'_, T> {
        type Value = Option<Vec<T>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "an object with a list under `{}`", self.key)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            // A key given twice counts as its last, as in a `Value`.
            while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if k == self.key {
                    found = Some(map.next_value::<Vec<T>>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct Repository {
    pub default_branch: String,
}

#[derive(Debug, Deserialize)]
pub struct GitRef {
    pub object: GitObject,
}

#[derive(Debug, Deserialize)]
pub struct GitObject {
    pub sha: String,
}

/// `GET /git/trees/{sha}` and `POST /git/trees`.
#[derive(Debug, Deserialize)]
pub struct Tree {
    pub sha: String,
    /// GitHub cuts very large recursive listings; a cut listing is not
    /// taken for the whole tree.
    pub truncated: bool,
    pub tree: Vec<TreeEntry>,
}

#[derive(Debug, Deserialize)]
pub struct TreeEntry {
    pub path: String,
    /// `blob`, `tree` or `commit` (a submodule).
    #[serde(rename = "type")]
    pub kind: String,
}

/// `GET /contents/{path}` for a file (a directory answers with a list, which
/// does not read as this).
#[derive(Debug, Deserialize)]
pub struct FileContent {
    pub content: String,
    pub sha: String,
}

/// `PUT /pulls/{n}/merge`: the merge commit.
#[derive(Debug, Deserialize)]
pub struct MergeResult {
    pub sha: String,
}

/// `PUT /contents/{path}`.
#[derive(Debug, Deserialize)]
pub struct FileCommit {
    pub commit: GitObject,
}

#[derive(Debug, Deserialize)]
pub struct Comparison {
    /// `ahead`, `behind`, `diverged` or `identical`: head against base.
    pub status: String,
    pub commits: Vec<ComparedCommit>,
    /// What changed (GitHub lists at most 300 files).
    #[serde(default)]
    pub files: Vec<DiffEntry>,
}

#[derive(Debug, Deserialize)]
pub struct ComparedCommit {
    pub sha: String,
    pub commit: CommitDetail,
}

#[derive(Debug, Deserialize)]
pub struct CommitDetail {
    pub message: String,
}

/// A pull request, from the list (which lacks `merged` and `mergeable`) or
/// from `GET /pulls/{number}` (which has both).
#[derive(Debug, Clone, Deserialize)]
pub struct Pull {
    pub number: i64,
    pub state: String,
    pub merged_at: Option<String>,
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
    #[serde(default)]
    pub merged: Option<bool>,
    #[serde(default)]
    pub mergeable: Option<bool>,
    pub head: PullHead,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PullHead {
    pub sha: String,
    /// The head's branch name.
    #[serde(default, rename = "ref")]
    pub branch: Option<String>,
}

/// One file of a pull request's diff.
#[derive(Debug, Deserialize)]
pub struct DiffEntry {
    pub filename: String,
    /// `added`, `removed`, `modified`, `renamed`, …
    pub status: String,
}

#[derive(Debug, Deserialize)]
pub struct Review {
    pub id: i64,
    pub state: String,
    /// Who reviewed (null for a deleted account).
    #[serde(default)]
    pub user: Option<Login>,
    #[serde(default)]
    pub body: String,
    /// The pull request's head when it was submitted.
    #[serde(default)]
    pub commit_id: Option<String>,
}

/// A comment on a line of a pull request's diff, made in a review.
#[derive(Debug, Deserialize)]
pub struct ReviewComment {
    pub path: String,
    /// The line of the new file (null where the diff moved on since).
    #[serde(default)]
    pub line: Option<u32>,
    #[serde(default)]
    pub original_line: Option<u32>,
    #[serde(default)]
    pub diff_hunk: String,
    pub body: String,
}

#[derive(Debug, Deserialize)]
pub struct CheckRun {
    pub id: i64,
    pub name: String,
    /// Where a person reads more; for an Actions job, its page (the job's
    /// id is its last part).
    #[serde(default)]
    pub details_url: Option<String>,
    pub status: String,
    pub conclusion: Option<String>,
    /// The app that reported it (nullable in GitHub's description).
    pub app: Option<App>,
    #[serde(default)]
    pub external_id: Option<String>,
    #[serde(default)]
    pub output: Option<CheckOutput>,
}

/// `GET /check-runs/{id}/annotations`: one annotation of a check run.
#[derive(Debug, Deserialize)]
pub struct Annotation {
    pub path: String,
    pub start_line: i64,
    #[serde(default)]
    pub annotation_level: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct App {
    #[serde(default)]
    pub id: Option<u64>,
    pub slug: Option<String>,
}

/// `GET /app`: the App the key belongs to.
#[derive(Debug, Deserialize)]
pub struct AppInfo {
    pub id: u64,
    pub slug: Option<String>,
    pub name: String,
}

/// `GET /repos/{owner}/{repo}/installation`: the App's installation there,
/// with what it was granted.
#[derive(Debug, Deserialize)]
pub struct Installation {
    pub id: u64,
    #[serde(default)]
    pub permissions: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub events: Vec<String>,
}

/// One item of `GET /app/hook/deliveries`: a webhook delivery as GitHub
/// recorded it.
#[derive(Debug, Deserialize)]
pub struct HookDelivery {
    pub id: i64,
    pub delivered_at: String,
    /// `OK`, or what went wrong (`Invalid HTTP Response: 401`, a timeout).
    pub status: String,
    /// The receiver's answer; 0 when there was none.
    pub status_code: i64,
    pub event: String,
}

/// `GET /repos/{owner}/{repo}/actions/secrets`: the secrets' names only.
#[derive(Debug, Deserialize)]
pub struct SecretNames {
    pub secrets: Vec<SecretName>,
}

#[derive(Debug, Deserialize)]
pub struct SecretName {
    pub name: String,
}

#[derive(Debug, Deserialize)]
pub struct CheckOutput {
    #[serde(default)]
    pub summary: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Issue {
    pub number: i64,
    pub id: IssueId,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    /// Who opened it (GitHub always says; absent only for a ghost).
    #[serde(default)]
    pub user: Option<Login>,
}

/// A user as GitHub names one in an answer.
#[derive(Debug, Deserialize)]
pub struct Login {
    pub login: String,
    /// `User`, `Bot` or `Organization`.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct Comment {
    pub id: i64,
    #[serde(default)]
    pub body: Option<String>,
    /// Its author (absent only for a deleted account's).
    #[serde(default)]
    pub user: Option<Login>,
}

/// The answer to a workflow dispatch asked to return the run's details.
#[derive(Debug, Deserialize)]
pub struct DispatchedRun {
    pub workflow_run_id: i64,
    pub html_url: String,
}

/// A workflow run, from the REST API or a `workflow_run` webhook.
#[derive(Debug, Clone, Deserialize)]
pub struct Run {
    pub id: i64,
    pub display_title: String,
    pub status: Option<String>,
    pub conclusion: Option<String>,
    pub html_url: String,
}

/// `GET /collaborators/{login}/permission`: `role_name` names custom roles
/// too, where `permission` maps them onto the five classic ones.
#[derive(Debug, Deserialize)]
pub struct CollaboratorPermission {
    pub role_name: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_missing_required_field_is_an_error_that_names_it() {
        let e = read::<Pull>(
            "GET /pulls/3",
            json!({ "number": 3, "state": "open", "merged_at": null }),
        )
        .unwrap_err();
        assert!(matches!(e, GitHubError::Unexpected { .. }));
        assert!(
            e.to_string().contains("GET /pulls/3") && e.to_string().contains("head"),
            "{e}"
        );
        // Nullable is not missing: a list item without `mergeable` reads.
        let p: Pull = read(
            "GET /pulls",
            json!({ "number": 3, "state": "closed", "merged_at": "2026-11-22T10:00:00Z", "head": { "sha": "abc" } }),
        )
        .unwrap();
        assert_eq!((p.mergeable, p.merged_at.is_some()), (None, true));
    }

    /// A page read straight from its text reads as the same page read
    /// through a `Value` did, for any page: what is read, and what is an
    /// error.
    #[test]
    fn a_list_read_from_text_reads_as_through_a_value() {
        use proptest::prelude::*;
        fn through_value(body: &str, key: Option<&str>) -> Option<Vec<Run>> {
            let mut v: serde_json::Value = serde_json::from_str(body).ok()?;
            let list = match key {
                Some(k) => v.get_mut(k)?.take(),
                None => v,
            };
            let serde_json::Value::Array(items) = list else {
                return None;
            };
            items
                .into_iter()
                .map(|i| read::<Run>("x", i).ok())
                .collect()
        }
        let run = prop_oneof![
            Just(
                json!({"id": 1, "display_title": "a", "status": "queued", "conclusion": null, "html_url": "u"})
            ),
            Just(
                json!({"id": 2, "display_title": "b", "status": null, "html_url": "u", "repository": {"id": 9, "name": "n"}})
            ),
            // Without a required field.
            Just(json!({"id": 3, "status": "completed", "html_url": "u"})),
            Just(json!({"id": "4", "display_title": "d", "html_url": "u"})),
            Just(json!(7)),
        ];
        let page = (
            proptest::collection::vec(run, 0..4),
            prop_oneof![Just("workflow_runs"), Just("check_runs")],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(items, under, keyed, padded)| {
                let list = serde_json::Value::Array(items);
                let mut body = if keyed {
                    json!({ "total_count": 1, under: list })
                } else {
                    list
                };
                if padded && keyed {
                    body["workflow_runs_extra"] = json!([1, 2]);
                }
                body.to_string()
            });
        proptest!(|(body in page, key in prop_oneof![Just(None), Just(Some("workflow_runs"))])| {
            let direct = read_list::<Run>("x", &body, key).ok();
            prop_assert_eq!(
                direct.map(|l| l.iter().map(|r| r.id).collect::<Vec<_>>()),
                through_value(&body, key).map(|l| l.iter().map(|r| r.id).collect::<Vec<_>>()),
                "{}", body
            );
        });
        // Not JSON, and trailing text, are errors that say where.
        for bad in ["{\"workflow_runs\": [", "[] []", ""] {
            let e = read_list::<Run>("GET /runs", bad, Some("workflow_runs")).unwrap_err();
            assert!(e.to_string().contains("GET /runs"), "{e}");
        }
    }
}

/// `GET /repos/{owner}/{repo}/commits/{ref}`, as far as it is read.
#[derive(Debug, Deserialize)]
pub struct Commit {
    pub parents: Vec<CommitParent>,
}

#[derive(Debug, Deserialize)]
pub struct CommitParent {
    pub sha: String,
}
