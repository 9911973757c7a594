//! What people see on GitHub: the sticky status comment (coalesced) and the
//! units' sub-issues (created, closed, labelled).

use super::{Live, OpContext, OpError, Operations};
use crate::engine::{DispatchId, OperationState, OverallStatus, UnitStatus};
use crate::report;
use crate::store::sql::UnitIssue;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The operation's sticky status comment: its id once made or found, and
/// what the last edit said, so an edit is made only when the text changes
/// and at most once per interval.
#[derive(Debug)]
pub(super) struct StatusComment {
    /// The comment's id (in the store as well); None until made or found.
    pub id: Option<i64>,
    /// Whether the state changed since GitHub was last shown it.
    dirty: bool,
    last_flush: Option<Instant>,
    last_text: String,
    /// Whether the comment says the installation is near GitHub's rate
    /// limit: a change either way is an edit to make.
    slowed: bool,
}

impl StatusComment {
    /// A status comment to be brought up to date (a loaded operation's
    /// comment may say less than its log).
    pub fn new(id: Option<i64>) -> StatusComment {
        StatusComment {
            id,
            dirty: true,
            last_flush: None,
            last_text: String::new(),
            slowed: false,
        }
    }

    /// Something people see changed: the comment is edited at the next flush.
    pub fn touch(&mut self) {
        self.dirty = true;
    }

    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Whether the installation is near the rate limit now: true when that
    /// changed, which is said at once.
    pub fn slowed(&mut self, slowed: bool) -> bool {
        let changed = slowed != self.slowed;
        if changed {
            self.slowed = slowed;
            self.dirty = true;
        }
        changed
    }

    /// Whether an edit is due: something changed and, unless `now`, the
    /// last edit was at least `interval` ago.
    fn due(&self, now: bool, interval: Duration) -> bool {
        self.dirty && (now || self.last_flush.is_none_or(|t| t.elapsed() >= interval))
    }

    /// GitHub was shown the state, in `text`.
    fn shown(&mut self, text: String) {
        self.last_text = text;
        self.dirty = false;
        self.last_flush = Some(Instant::now());
    }
}

impl Operations {
    /// Brings GitHub's view up to date: the status comment (at most once per
    /// interval unless `now`), the units' sub-issues, closed and labelled.
    pub(super) async fn flush(&self, live: &mut Live, now: bool) -> Result<(), OpError> {
        let Some(st) = live.driver.state.clone() else {
            return Ok(());
        };
        // Near the rate limit, edits are a minute apart at least.
        let interval = match self.gh.is_short(live.place.ctx.installation) {
            true => self.timings.status_interval.max(Duration::from_secs(60)),
            false => self.timings.status_interval,
        };
        if !live.place.status.due(now, interval) {
            return Ok(());
        }
        let ctx = live.place.ctx.clone();
        let repo = self.repo(&ctx);
        self.sync_unit_issues(&ctx, &st).await?;
        let runs = self.run_links(&ctx.op).await?;
        self.views.set_runs(
            &ctx.op,
            runs.iter().map(|(d, u)| (d.clone(), u.clone())).collect(),
        );
        let link = |d: &DispatchId| runs.get(&d.0).cloned();
        let now = chrono::Utc::now();
        let spent = self
            .store
            .spent_today(ctx.installation as i64, &ctx.repo)
            .await?;
        let mut footer = report::day_line(
            &ctx.repo,
            (ctx.installation != 0).then_some(ctx.installation),
            spent,
            report::DailyCaps {
                installation: self.limits.daily_budget,
                repo: ctx.daily_budget,
                prices: self.limits.costs,
                installation_usd: self.limits.daily_budget_usd,
                repo_usd: ctx.daily_budget_usd,
            },
        );
        if let Some(b) = self
            .gh
            .budget(ctx.installation)
            .filter(|b| b.is_short(now.timestamp()))
        {
            footer.push_str("\n\n");
            footer.push_str(&report::posts::slowed_line(
                b.remaining,
                b.limit,
                b.reset_unix,
            ));
        }
        if let Some(line) = live.place.runs.waiting_for_ci(self.timings.ci_grace) {
            footer.push_str("\n\n");
            footer.push_str(&line);
        }
        let text = report::posts::status_comment(&st, now, &link, Some(&footer));
        if text != live.place.status.last_text {
            let marker = report::posts::status_marker(&ctx.op);
            let id = match live.place.status.id {
                Some(id) => Some(id),
                None => repo
                    .marked(ctx.issue, Some(&ctx.started_at), &marker)
                    .await?
                    .map(|(id, _)| id),
            };
            let id = match id {
                Some(id) => {
                    repo.edit_comment(id, &text).await?;
                    id
                }
                None => repo.comment(ctx.issue, &text).await?,
            };
            if live.place.status.id != Some(id) {
                self.store.set_status_comment(&ctx.op, id).await?;
                live.place.status.id = Some(id);
            }
        }
        live.place.status.shown(text);
        if st.status == OverallStatus::Completed && live.driver.pending.is_empty() {
            self.store.set_active(&ctx.op, false).await?;
        }
        Ok(())
    }

    pub(super) async fn sync_unit_issues(
        &self,
        ctx: &OpContext,
        st: &OperationState,
    ) -> Result<(), OpError> {
        let repo = self.repo(ctx);
        let mut known = self.store.unit_issues(&ctx.op).await?;
        let label = format!("supervise:{}", ctx.op);
        // Work without a plan: only the generated plan's units are issues.
        let own_issue = |u: &str| st.workflow.as_ref().is_none_or(|w| w.has_own_issue(u));
        let wanted = st.units.iter().filter(|u| own_issue(&u.name)).count();
        if known.len() < wanted {
            let existing = repo.own_issues_labelled(&label).await?;
            for u in &st.plan.work_units {
                if known.iter().any(|k| k.unit == u.name) || !own_issue(&u.name) {
                    continue;
                }
                let marker = report::posts::unit_marker(&ctx.op, &u.name);
                let (number, id) = match existing.iter().find(|(_, _, b)| b.contains(&marker)) {
                    Some((n, id, _)) => (*n, *id),
                    None => {
                        repo.create_issue(
                            &format!("{} — {}", u.name, st.name),
                            &report::posts::unit_issue_body(&ctx.op, u, ctx.issue),
                            &["supervise", &label],
                        )
                        .await?
                    }
                };
                repo.add_sub_issue(ctx.issue, id).await?;
                let ui = UnitIssue {
                    unit: u.name.clone(),
                    number,
                    issue_id: id.0,
                    flags: "none".into(),
                };
                self.store.put_unit_issue(&ctx.op, &ui).await?;
                known.push(ui);
            }
        }
        for ui in known {
            let Some(unit) = st.units.iter().find(|u| u.name == ui.unit) else {
                continue;
            };
            let want = match unit.status {
                UnitStatus::Completed => "closed",
                UnitStatus::Blocked => "blocked",
                _ => "none",
            };
            if ui.flags == want || ui.flags == "closed" {
                continue;
            }
            // A unit resumed after BLOCKED loses the label, whether it runs
            // again or completes at once.
            if ui.flags == "blocked" {
                repo.remove_label(ui.number, "blocked").await?;
            }
            match want {
                "closed" => repo.close_issue(ui.number).await?,
                "blocked" => repo.add_labels(ui.number, &["blocked"]).await?,
                _ => {}
            }
            self.store
                .put_unit_issue(
                    &ctx.op,
                    &UnitIssue {
                        flags: want.into(),
                        ..ui
                    },
                )
                .await?;
        }
        Ok(())
    }

    /// Each dispatch's run on GitHub, for links in what people read.
    pub(super) async fn run_links(&self, op: &str) -> Result<HashMap<String, String>, OpError> {
        Ok(self
            .store
            .runs_of(op)
            .await?
            .into_iter()
            .filter_map(|r| r.html_url.map(|u| (r.dispatch, u)))
            .collect())
    }
}
