//! A person's review of a verified sprint, locally: `supervise review`
//! records it in `.supervise/reviews.jsonl` (one JSON line each, kept as
//! GitHub keeps a pull request's reviews), and with `merge: after_review`
//! (`--review`) a sprint's merge waits on that record — an approval of its
//! branch's head merges it, a request for changes the engine has not seen
//! becomes a fix round (see `engine::decide::review`). Read anew at every
//! look, so a review given while no supervisor runs is acted on when one
//! does, and a restart loses none.

use super::executor::LocalPlace;
use crate::drive::Outcome;
use crate::engine::{Input, NoticeKind, OperationState, ReviewFeedback};
use crate::plan::SprintId;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::Path;

/// What a review says of the sprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Approved,
    ChangesRequested,
}

/// One review, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalReview {
    pub unit: String,
    pub sprint: SprintId,
    pub verdict: Verdict,
    /// Its id, reviewer, the head it reviewed (an approval counts for that
    /// head only), and what it asks.
    pub feedback: ReviewFeedback,
}

/// The reviews file of an operation's state directory.
fn file(dir: &Path) -> std::path::PathBuf {
    dir.join("reviews.jsonl")
}

/// Appends a review (one line, written whole).
pub fn record(dir: &Path, review: &LocalReview) -> Result<()> {
    let mut line = serde_json::to_string(review)?;
    line.push('\n');
    let path = file(dir);
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(line.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Every review recorded for `unit`'s sprint `sprint`, oldest first. A line
/// that cannot be read (a write cut short by a crash) is passed over.
pub fn read(dir: &Path, unit: &str, sprint: &SprintId) -> Vec<LocalReview> {
    std::fs::read_to_string(file(dir))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<LocalReview>(l).ok())
        .filter(|r| r.unit == unit && &r.sprint == sprint)
        .collect()
}

impl LocalPlace {
    /// Whether the merge of `unit`'s verified sprint waits on a review:
    /// `None` to merge now, else what the drive does instead (wait, or the
    /// fix round a request for changes starts).
    pub(super) fn review_gate(
        &mut self,
        st: &OperationState,
        unit: &str,
        sprint: &SprintId,
        branch: &str,
    ) -> Result<Option<Outcome>> {
        if self.settings.merge != crate::settings::MergeMode::AfterReview {
            return Ok(None);
        }
        let Some(sp) = st
            .unit_index(unit)
            .and_then(|u| st.units[u].sprints.iter().find(|s| &s.id == sprint))
            .filter(|s| s.awaiting_merge())
        else {
            return Ok(None);
        };
        let reviews = read(&self.dir, unit, sprint);
        if let Some(asked) = reviews.iter().find(|r| {
            r.verdict == Verdict::ChangesRequested && !sp.reviews_seen.contains(&r.feedback.id)
        }) {
            return Ok(Some(Outcome::Done(vec![Input::ChangesRequested {
                unit: unit.to_string(),
                sprint: sprint.clone(),
                review: asked.feedback.clone(),
            }])));
        }
        let head = self.git.branch_head(branch).unwrap_or_default();
        if reviews
            .iter()
            .any(|r| r.verdict == Verdict::Approved && r.feedback.commit == head)
        {
            return Ok(None);
        }
        if self.review_told.insert(head.clone()) {
            let text = format!(
                "{unit} Sprint {sprint} is verified and waits for your review (its branch {branch}, at {}): `supervise review {} --approve` merges it; `supervise review {} -m \"…\"` asks for changes.",
                crate::text::short_id(&head),
                crate::text::shell_quote(unit),
                crate::text::shell_quote(unit),
            );
            self.screen.notice(&format!(
                "{}{text}",
                crate::report::notice_prefix(NoticeKind::AwaitingReview)
            ));
            let notice = crate::notify::Notice::new(
                &st.id.0,
                format!("review-{head}"),
                NoticeKind::AwaitingReview,
                Some(unit),
                &text,
            );
            self.notifier.tell(NoticeKind::AwaitingReview, notice);
        }
        Ok(Some(Outcome::Wait(Vec::new())))
    }
}
