//! The operation's verdict is about the head a person will merge: once the
//! last unit completed, the place runs every criterion again on the final
//! integration head, and what it found is decided here.

use super::{Decider, Effect, Event, HeadVerification, NoticeKind, OverallStatus, Refusal};

impl Decider<'_> {
    /// Records the final head's re-verification. A criterion that fails
    /// there fails the verdict, whatever its sprint's own verdict was: it
    /// is a regression when it passed as its sprint completed. People are
    /// told which criterion, of which sprint, and the merge that broke it;
    /// nothing is dispatched (the fix is a person's call: a later sprint
    /// may have changed the plan's meaning on purpose), and the final pull
    /// request waits for a head that passes.
    pub(super) fn head_verified(&mut self, verification: HeadVerification) -> Result<(), Refusal> {
        let st = self.require()?;
        if st.status != OverallStatus::Completed {
            return Err(Refusal::NotAllowed(
                "the final head is verified once every work unit is COMPLETED".into(),
            ));
        }
        if st.head_verification.as_ref() == Some(&verification) {
            return Ok(());
        }
        let head = crate::contract::short_id(&verification.head);
        let mut lines = Vec::new();
        for f in verification.failures() {
            let passed_then = st
                .plan
                .unit(&f.unit)
                .and_then(|_| st.unit_index(&f.unit))
                .and_then(|u| {
                    st.units[u]
                        .sprints
                        .iter()
                        .find(|s| s.id == f.sprint)?
                        .completion
                        .as_ref()
                })
                .is_some_and(|c| {
                    c.criteria.iter().any(|r| {
                        r.text == f.result.text
                            && r.outcome == crate::engine::CriterionOutcome::Passed
                    })
                });
            let what = if passed_then {
                "passed when its sprint completed and fails on the final head"
            } else {
                "fails on the final head"
            };
            let detail = f.result.detail.lines().last().unwrap_or("").trim();
            let mut line = format!(
                "- {} Sprint {}: `{}` {what}",
                f.unit, f.sprint, f.result.text
            );
            if !detail.is_empty() {
                line.push_str(&format!(" ({detail})"));
            }
            if let Some(by) = &f.broken_by {
                line.push_str(&format!("; broken by {by}"));
            }
            lines.push(line);
        }
        self.emit(Event::HeadVerified {
            verification: verification.clone(),
            at: self.now,
        });
        let total = verification.checks.len();
        if lines.is_empty() {
            self.log(
                None,
                None,
                "Final head verified".into(),
                format!("all {total} machine-checkable exit criteria pass on {head}"),
            );
        } else {
            let failing = lines.len();
            self.log(
                None,
                None,
                "VERIFICATION FAILED on the final head".into(),
                format!("{failing} of {total} criteria fail on {head}"),
            );
            let first = verification
                .failures()
                .next()
                .expect("one failure at least");
            self.effects.push(Effect::Notify {
                kind: NoticeKind::Blocked,
                unit: Some(first.unit.clone()),
                text: format!(
                    "VERIFICATION FAILED: every work unit completed, but {failing} of {total} exit criteria fail on the final head {head}:\n{}\nFix it on the integration branch (or resume the unit that broke it), then check a sprint again with `supervise verify --unit {} --sprint {}`.",
                    lines.join("\n"),
                    first.unit,
                    first.sprint
                ),
            });
        }
        self.effects.push(Effect::PublishStatus);
        Ok(())
    }
}
