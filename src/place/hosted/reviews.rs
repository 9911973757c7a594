//! People's reviews of a sprint's pull request, while it waits for an
//! approval (`merge: after_review`). A review that asks for changes, by
//! someone who may write, becomes a fix round's feedback for the engine —
//! its body and every inline comment with the hunk it was written against,
//! scrubbed and bounded; a stranger's is answered once and not acted on.
//! After a fix round, one reply on the pull request says what became of
//! each comment (judged from git: the files the round changed), and the
//! reviewers are asked again.
//!
//! Each reviewer's latest review counts, as GitHub counts them: a change
//! request answered by a later approval asks for nothing.

use super::{may_write, Repo};
use crate::engine::{DispatchId, Input, OperationState, ReviewComment, ReviewFeedback, SprintRun};
use crate::github::answers::Review;
use crate::github::GitHubError;
use crate::plan::SprintId;
use std::collections::HashSet;
use std::fmt::Write as _;

/// The most inline comments one review hands to a round (the rest are on
/// the pull request for the agent to read).
const COMMENTS: usize = 60;
/// The most characters of a review's body or of one comment kept.
const TEXT_CHARS: usize = 8000;

/// What this replica did about reviews, so a poll does not ask GitHub again
/// for what it answered (a restart asks: each answer carries its marker).
#[derive(Debug, Default)]
pub(super) struct Reviews {
    /// Change requests by people who may not write, answered.
    ignored: HashSet<i64>,
    /// Fix rounds whose reply was posted, by the dispatch that did the round.
    answered: HashSet<DispatchId>,
}

/// The sprint `unit`/`sprint` in the operation's state.
pub(super) fn sprint_run<'a>(
    state: Option<&'a OperationState>,
    unit: &str,
    sprint: &SprintId,
) -> Option<&'a SprintRun> {
    let st = state?;
    let u = st.unit_index(unit)?;
    st.units[u].sprints.iter().find(|s| &s.id == sprint)
}

fn bounded(text: &str) -> String {
    let text = crate::scrub::scrub(text);
    if text.chars().count() <= TEXT_CHARS {
        return text.into_owned();
    }
    text.chars().take(TEXT_CHARS).collect()
}

/// A review asking for changes as a fix round's feedback: its body and its
/// inline comments (each with its hunk), scrubbed and bounded.
pub(super) async fn feedback(
    repo: &Repo<'_>,
    number: i64,
    (id, login): (i64, &str),
    commit: &str,
    body: &str,
) -> Result<ReviewFeedback, GitHubError> {
    let comments = repo
        .review_comments(number, id)
        .await?
        .into_iter()
        .take(COMMENTS)
        .map(|c| ReviewComment {
            line: c.line.or(c.original_line),
            path: c.path,
            hunk: bounded(&c.diff_hunk),
            body: bounded(&c.body),
        })
        .collect();
    Ok(ReviewFeedback {
        id: id.to_string(),
        reviewer: login.to_string(),
        commit: commit.to_string(),
        body: bounded(body),
        comments,
    })
}

/// The reply to a change request by someone who may not write.
pub(super) async fn not_acted_on(
    repo: &Repo<'_>,
    op: &str,
    number: i64,
    (id, login): (i64, &str),
) -> Result<(), GitHubError> {
    let marker = crate::report::posts::notice_marker(op, &format!("review-{id}"));
    repo.comment_once(
        number,
        None,
        &marker,
        &format!(
            "The review by {login} asks for changes, but only people who may write to this repository can start a fix round, so it was not acted on. Someone who may write can ask for the same changes in a review of their own."
        ),
    )
    .await
}

impl Reviews {
    /// A change request the engine has not seen, from someone who may
    /// write, as the input that starts its fix round; strangers' are
    /// answered on the pull request on the way.
    pub async fn changes_asked(
        &mut self,
        repo: &Repo<'_>,
        (op, number): (&str, i64),
        (unit, sprint): (&str, &SprintId),
        latest: &[(String, Review)],
        seen: &[String],
    ) -> Result<Option<Input>, GitHubError> {
        for (login, r) in latest {
            let login = login.clone();
            if r.state != "CHANGES_REQUESTED"
                || seen.contains(&r.id.to_string())
                || self.ignored.contains(&r.id)
            {
                continue;
            }
            if !may_write(repo, &login).await? {
                not_acted_on(repo, op, number, (r.id, &login)).await?;
                self.ignored.insert(r.id);
                tracing::info!(%login, review = r.id, "a change request by someone who cannot write; answered, not acted on");
                continue;
            }
            let commit = r.commit_id.clone().unwrap_or_default();
            return Ok(Some(Input::ChangesRequested {
                unit: unit.to_string(),
                sprint: sprint.clone(),
                review: feedback(repo, number, (r.id, &login), &commit, &r.body).await?,
            }));
        }
        Ok(None)
    }

    /// After a fix round (`dispatch` did it and was verified at `head`):
    /// one reply on the pull request saying what became of each comment,
    /// and the reviewers asked again. Once per round.
    pub async fn answer_round(
        &mut self,
        repo: &Repo<'_>,
        op: &str,
        number: i64,
        sprint: &SprintRun,
        dispatch: &DispatchId,
        head: Option<&str>,
    ) -> Result<(), GitHubError> {
        if sprint.review.is_empty() || self.answered.contains(dispatch) {
            return Ok(());
        }
        // Answered before a restart: the reviewers are not asked again
        // (one who has reviewed since would be asked once more).
        let marker =
            crate::report::posts::notice_marker(op, &format!("review-round-{}", dispatch.0));
        if repo.marked(number, None, &marker).await?.is_some() {
            self.answered.insert(dispatch.clone());
            return Ok(());
        }
        let mut reply = format!(
            "Fix round {} for this review is done, and the sprint's exit criteria were verified again{}.\n",
            sprint.review_rounds,
            head.map(|h| format!(" on `{}`", crate::text::short_id(h)))
                .unwrap_or_default()
        );
        for review in &sprint.review {
            // What the round changed, by file: from the head reviewed to
            // the head verified (git's word, not the agent's).
            let changed = match head.filter(|_| !review.commit.is_empty()) {
                Some(h) => Some(repo.changed_between(&review.commit, h).await?),
                None => None,
            };
            let _ = writeln!(reply, "\n**Review by {}**\n", review.reviewer);
            if review.comments.is_empty() {
                let _ = writeln!(
                    reply,
                    "No inline comments; the review's body was the request."
                );
            } else {
                reply.push_str("| Comment | In this round |\n|---|---|\n");
                for c in &review.comments {
                    let said = match &changed {
                        Some(files) if files.contains(&c.path) => "the file was changed",
                        Some(_) => "the file was not changed: look at whether the request was met elsewhere",
                        None => "not known (the head reviewed is not known)",
                    };
                    let first = c
                        .body
                        .lines()
                        .next()
                        .unwrap_or("")
                        .chars()
                        .take(80)
                        .collect::<String>();
                    let _ = writeln!(
                        reply,
                        "| {} {} | {said} |",
                        crate::text::code_span(&c.place()),
                        first.replace('|', "\\|")
                    );
                }
            }
        }
        let mut who: Vec<String> = sprint.review.iter().map(|r| r.reviewer.clone()).collect();
        who.sort();
        who.dedup();
        let _ = write!(
            reply,
            "\nAsked again for a review: {}. An approval merges it; another review asking for changes starts the next round.",
            who.join(", ")
        );
        // A reviewer who may no longer be asked (left the repository) is
        // not a reason to hold the merge: said in the log. Asked before the
        // reply, so whoever reads the reply is already asked.
        if let Err(e) = repo.request_reviewers(number, &who).await {
            tracing::warn!(error = %e, "could not ask the reviewers again");
        }
        repo.comment_once(number, None, &marker, &reply).await?;
        self.answered.insert(dispatch.clone());
        Ok(())
    }
}
