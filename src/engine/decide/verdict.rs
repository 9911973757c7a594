//! The operation's verdict is about the head a person will merge: once the
//! last unit completed, the place runs every criterion again on the final
//! integration head, and what it found is decided here.

use super::{
    CriterionOutcome, Decider, Effect, Event, HeadVerification, NoticeKind, OverallStatus, Refusal,
};

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
        let head = crate::text::short_id(&verification.head);
        let passed_then = |unit: &str, sprint: &crate::plan::SprintId, text: &str| {
            st.unit_index(unit)
                .and_then(|u| st.units[u].sprints.iter().find(|s| s.id == *sprint))
                .and_then(|s| s.completion.as_ref())
                .is_some_and(|c| {
                    c.criteria
                        .iter()
                        .any(|r| r.text == text && r.outcome == CriterionOutcome::Passed)
                })
        };
        let mut lines = Vec::new();
        for f in verification.failures() {
            let what = if passed_then(&f.unit, &f.sprint, &f.result.text) {
                "passed when its sprint completed and fails on the final head"
            } else {
                "fails on the final head"
            };
            let mut line = format!(
                "- {} Sprint {}: `{}` {what}",
                f.unit, f.sprint, f.result.text
            );
            let detail = f.result.detail.lines().last().unwrap_or("").trim();
            if !detail.is_empty() {
                line.push_str(&format!(" ({detail})"));
            }
            if let Some(by) = &f.broken_by {
                line.push_str(&format!("; broken by {by}"));
            }
            lines.push(line);
        }
        let branch = &verification.branch;
        let first = verification
            .failures()
            .next()
            .map(|f| (f.unit.clone(), f.sprint.clone()));
        self.emit(Event::HeadVerified {
            verification: verification.clone(),
            at: self.now,
        });
        let total = verification.checks.len();
        match first {
            None => self.log(
                None,
                None,
                "Final head verified".into(),
                format!("all {total} machine-checkable exit criteria pass on {head}"),
            ),
            Some((unit, sprint)) => {
                let failing = lines.len();
                self.log(
                    None,
                    None,
                    "VERIFICATION FAILED on the final head".into(),
                    format!("{failing} of {total} criteria fail on {head}"),
                );
                // Every step typed as it stands: the integration branch is
                // where the work is, and `verify` checks the checkout it
                // runs in.
                self.effects.push(Effect::Notify {
                    kind: NoticeKind::VerificationFailed,
                    unit: Some(unit.clone()),
                    text: format!(
                        "VERIFICATION FAILED: every work unit completed, but {failing} of {total} exit criteria fail on the final head {head}:\n{}\nTo mend it: `git checkout {branch}`, fix and commit there, then check with `supervise verify --unit {} --sprint {sprint}`.",
                        lines.join("\n"),
                        crate::text::shell_quote(&unit),
                    ),
                });
            }
        }
        self.effects.push(Effect::PublishStatus);
        Ok(())
    }
}
