//! People in the loop: a review that asks for changes to a sprint's verified
//! work starts a fix round on that sprint's branch — the sprint goes back to
//! work with the review quoted, is verified again, and waits for its merge
//! as before. Rounds have their own cap (`review_rounds`); past it the unit
//! is BLOCKED for the reviewer. A review told while a round runs is kept
//! for the next one, so the agent answers every comment and no reviewer
//! waits on a round that ignores them.

use super::Decider;
use crate::engine::events::{Event, ReviewFeedback};
use crate::engine::state::{OverallStatus, SprintStatus};
use crate::engine::Refusal;
use crate::plan::{Sprint, SprintId, SprintType, WorkUnit};

/// The name of the units a review of the final pull request adds (`review
/// fixes 2` for the second).
pub const REVIEW_FIXES: &str = "review fixes";

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

    /// Changes asked for on the final pull request, once every unit is
    /// done: a "review fixes" unit after all the others, whose one sprint
    /// is a fix round on the integration branch's work (the review quoted,
    /// no failure counted); when it is merged the operation completes
    /// again, and the whole plan is verified again on the new head. One
    /// that comes while such a unit runs is answered by its next round.
    pub(super) fn final_changes_requested(
        &mut self,
        review: ReviewFeedback,
    ) -> Result<(), Refusal> {
        let st = self.require()?;
        if st
            .units
            .iter()
            .flat_map(|u| &u.sprints)
            .any(|s| s.reviews_seen.contains(&review.id))
        {
            return Ok(());
        }
        let fixing = st.units.iter().position(|u| {
            u.name.starts_with(REVIEW_FIXES)
                && u.sprints
                    .iter()
                    .any(|s| s.status() != SprintStatus::Completed || s.awaiting_merge())
        });
        if let Some(u) = fixing {
            let sprint = self.st().units[u].sprints[0].id.clone();
            let unit = self.st().units[u].name.clone();
            return self.changes_requested(&unit, &sprint, review);
        }
        if st.status != OverallStatus::Completed {
            return Err(Refusal::NotAllowed(
                "the final pull request is reviewed once every unit is done; review the sprints' pull requests until then".into(),
            ));
        }
        let rounds = st
            .units
            .iter()
            .filter(|u| u.name.starts_with(REVIEW_FIXES))
            .count() as u32;
        let cap = st.config.review_rounds;
        if rounds >= cap {
            return Err(Refusal::NotAllowed(format!(
                "the final pull request had {} already ({cap} is the cap, `review_rounds`): push the changes you want to its branch",
                crate::text::count(cap as usize, "fix round")
            )));
        }
        let name = match rounds {
            0 => REVIEW_FIXES.to_string(),
            n => format!("{REVIEW_FIXES} {}", n + 1),
        };
        let unit = WorkUnit {
            name: name.clone(),
            directory: None,
            layer: st.units.len() as u32,
            depends_on: st.units.iter().map(|u| u.name.clone()).collect(),
            line: 0,
            section: None,
            sprints: vec![Sprint {
                id: SprintId::parse("1").expect("1 is a sprint id"),
                name: "Changes asked for in the review of the final pull request".into(),
                line: 0,
                kind: SprintType::Code,
                tasks: Vec::new(),
                entry_criteria: Vec::new(),
                exit_criteria: Vec::new(),
                notes: Vec::new(),
                body: String::new(),
            }],
        };
        let who = review.reviewer.clone();
        self.append_work(
            vec![unit],
            format!("{who} asked for changes on the final pull request: a fix round on the integration branch, then the whole plan verified again"),
        )?;
        let u = self.st().units.len() - 1;
        self.review_round(u, 0, vec![review]);
        self.settle();
        Ok(())
    }
}
