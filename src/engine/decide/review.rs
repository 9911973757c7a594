//! People in the loop: a review that asks for changes to a sprint's verified
//! work starts a fix round on that sprint's branch — the sprint goes back to
//! work with the review quoted, is verified again, and waits for its merge
//! as before. Rounds have their own cap (`review_rounds`); past it the unit
//! is BLOCKED for the reviewer. A review told while a round runs is kept
//! for the next one, so the agent answers every comment and no reviewer
//! waits on a round that ignores them.

use super::Decider;
use crate::engine::events::{Event, ReviewFeedback};
use crate::engine::state::SprintStatus;
use crate::engine::Refusal;
use crate::plan::SprintId;

impl Decider<'_> {
    pub(super) fn changes_requested(
        &mut self,
        unit: &str,
        sprint: &SprintId,
        review: ReviewFeedback,
    ) -> Result<(), Refusal> {
        let (u, s) = self.locate(unit, sprint)?;
        let sp = self.sprint(u, s);
        // Told twice (a webhook and a poll, a restart): acted on once.
        if sp.reviews_seen.contains(&review.id) {
            return Ok(());
        }
        if sp.awaiting_merge() {
            self.review_round(u, s, vec![review]);
        } else if !sp.review.is_empty() && sp.status() != SprintStatus::Completed {
            let id = sp.id.clone();
            let who = review.reviewer.clone();
            self.emit(Event::ReviewQueued {
                unit: u,
                sprint: s,
                review,
                at: self.now,
            });
            self.log(
                Some(u),
                Some(s),
                format!("Sprint {id}: a review by {who} waits for the next fix round"),
                "a fix round is under way; what arrives meanwhile is answered together by the next"
                    .into(),
            );
        } else {
            let state = if sp.status() == SprintStatus::Completed {
                "its work is merged already"
            } else {
                "it is not verified yet"
            };
            return Err(Refusal::NotAllowed(format!(
                "{unit} Sprint {sprint} is not waiting for a review: {state}"
            )));
        }
        self.settle();
        Ok(())
    }

    /// Starts a fix round for `reviews` on a verified sprint, or — past the
    /// cap — BLOCKS its unit for the people who keep asking.
    pub(super) fn review_round(&mut self, u: usize, s: usize, reviews: Vec<ReviewFeedback>) {
        let cap = self.st().config.review_rounds;
        let round = self.sprint(u, s).review_rounds + 1;
        let id = self.sprint(u, s).id.clone();
        let mut who: Vec<String> = reviews.iter().map(|r| r.reviewer.clone()).collect();
        who.sort();
        who.dedup();
        let who = who.join(", ");
        if round > cap {
            // Kept as seen (and for whoever resumes), not acted on: a
            // person decides now.
            for review in reviews {
                self.emit(Event::ReviewQueued {
                    unit: u,
                    sprint: s,
                    review,
                    at: self.now,
                });
            }
            self.merge_blocked(
                u,
                s,
                &format!(
                    "{who} still asks for changes after {} ({cap} is the cap, `review_rounds`); push what is wanted to the sprint's branch or approve it",
                    crate::text::count(cap as usize, "fix round")
                ),
            );
            return;
        }
        let comments: usize = reviews.iter().map(|r| r.comments.len()).sum();
        self.emit(Event::ReviewRound {
            unit: u,
            sprint: s,
            reviews,
            at: self.now,
        });
        self.log(
            Some(u),
            Some(s),
            format!("Sprint {id} REVIEW ROUND {round}/{cap}"),
            format!(
                "changes requested by {who} ({}): a fix round on the sprint's branch, then its exit criteria verified again",
                crate::text::count(comments, "inline comment")
            ),
        );
    }
}
