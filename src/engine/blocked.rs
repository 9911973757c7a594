//! The BLOCKED notice (§13): one text for every view that says a unit is
//! BLOCKED — the terminal, the issue comment, `status` and
//! SUPERVISOR_STATE.md — and its parts for the web view. It names what
//! failed, what the failing check printed, where the sprint's work is and
//! how to hand a fix back. Commands are the command line's (`supervise
//! resume core`); GitHub's views turn them into comments.

use super::state::OperationState;
use super::FailedCheck;
use crate::plan::SprintId;

/// What a BLOCKED unit's notice says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked<'a> {
    pub unit: &'a str,
    pub sprint: &'a SprintId,
    /// `failed after 3 attempts`, `still does not merge after 2 rounds`.
    pub why: String,
    pub last_failure: Option<&'a str>,
    pub check: Option<&'a FailedCheck>,
    /// The sprint's branch, where its last attempt's work is.
    pub branch: String,
}

impl OperationState {
    /// The notice of unit `u`'s sprint `s`, BLOCKED because of `why` after
    /// `last` (the sprint's last counted failure when `None`).
    pub fn blocked<'a>(
        &'a self,
        u: usize,
        s: usize,
        why: String,
        last: Option<&'a str>,
    ) -> Blocked<'a> {
        let unit = &self.units[u];
        let sprint = &unit.sprints[s];
        let last_failure = last.or(sprint.last_failure.as_deref());
        Blocked {
            unit: &unit.name,
            sprint: &sprint.id,
            why,
            last_failure,
            // A check's output belongs to the failure it was counted with.
            check: sprint
                .failed_check
                .as_ref()
                .filter(|_| last_failure == sprint.last_failure.as_deref()),
            branch: super::naming::sprint_branch(&self.id.0, &unit.slug, sprint.id.as_str()),
        }
    }
}

impl Blocked<'_> {
    /// The first line of the last failure (the rest is in the decision log).
    pub fn last_failure_line(&self) -> Option<&str> {
        self.last_failure.and_then(|f| f.lines().next())
    }

    /// How a person hands a fix back.
    pub fn hand_back(&self) -> String {
        format!(
            "To hand a fix back: commit it on {}, then `supervise resume {}` (the sprint starts again from that branch).",
            self.branch, self.unit
        )
    }

    /// The notice as plain text, a line a part.
    pub fn text(&self) -> String {
        let mut out = format!(
            "BLOCKED: {} Sprint {} {}.",
            self.unit, self.sprint, self.why
        );
        if let Some(f) = self.last_failure_line() {
            out.push_str(&format!("\nLast failure: {f}"));
            // A failure of many lines (a build gate's output) keeps its
            // end, unless a failing check's output is quoted below.
            let rest: Vec<&str> = self
                .last_failure
                .map(|f| f.lines().skip(1).collect())
                .unwrap_or_default();
            if self.check.is_none() && !rest.is_empty() {
                for line in &rest[rest.len().saturating_sub(15)..] {
                    out.push_str(&format!("\n    {line}"));
                }
            }
        }
        if let Some(c) = self.check {
            out.push('\n');
            out.push_str(&c.quoted());
        }
        out.push_str(&format!("\nThe sprint's work: branch {}", self.branch));
        out.push('\n');
        out.push_str(&self.hand_back());
        out.push_str(&format!(
            "\nTo retry as it is: `supervise resume {}` (resume resets the sprint to PENDING and the work unit to RUNNING)",
            self.unit
        ));
        out
    }
}
