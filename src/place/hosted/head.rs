//! The final integration head's re-verification on GitHub: the verdict
//! is about the head a person will merge. Where every criterion is a file,
//! the service reads them at the head itself; where a command is among
//! them, the agent workflow is dispatched as a final verification (sprint
//! `final`): its verifying job runs every criterion on the head and
//! bisects a failure, with no credential, and its publishing job reports
//! the results as the check run `supervise: final verification`, which the
//! service takes. The service runs no repository code.

use super::{engine, integration_branch, OpContext, OpError, OperationState, Operations, RunRow};
use crate::attempt::head::{FinalOrder, FinalSprint, FINAL_SPRINT};
use crate::contract::{sprint_branch, FINAL_CHECK};
use crate::engine::HeadVerification;
use serde_json::json;

/// Where the final head's verification stands.
pub(super) enum Verifying {
    /// Found (None: work without a plan, whose later phases change what
    /// earlier ones made on purpose, or a branch that is gone).
    Done(Option<HeadVerification>),
    /// The verifying job is at it; its check run is looked for again when
    /// its run completes (or at the next reconciliation).
    Waiting,
}

/// The dispatch id of the final verification of `head`: a head that moves
/// (a person mends a regression) is verified afresh.
pub(super) fn final_dispatch(op: &str, head: &str) -> String {
    format!("{op}/final/{}", crate::text::short_id(head))
}

/// Whether `dispatch` is a final verification's, not an attempt's.
pub(super) fn is_final_dispatch(dispatch: &str) -> bool {
    dispatch.rsplit('/').nth(1) == Some("final")
}

impl Operations {
    /// The final head's verification: read here when files alone decide,
    /// else taken from the verifying job's check run, dispatching that job
    /// once per head.
    pub(super) async fn verify_head(
        &self,
        ctx: &OpContext,
        st: &OperationState,
    ) -> Result<Verifying, OpError> {
        if st.workflow.is_some() {
            return Ok(Verifying::Done(None));
        }
        let repo = self.repo(ctx);
        let branch = integration_branch(&ctx.op);
        let Some(head) = repo.branch_sha(&branch).await? else {
            return Ok(Verifying::Done(None));
        };
        // One read of the head's check runs: the verifying job's, and the
        // service's own reading of the files (made once per head, though
        // the final report that asks for it may run again).
        let app = repo.gh.app_id();
        let checks = repo.checks(&head).await?;
        let ours = |id: &str| {
            checks
                .iter()
                .find(|c| c.name == FINAL_CHECK && c.external_id == id && c.is_supervisors(app))
        };
        let reported = ours(&ctx.op).is_some();
        let criteria = st.completed_criteria();
        if criteria.iter().all(|(_, _, c)| c.assertion.is_some()) {
            let v = self
                .verify_head_files(ctx, st, head, "no command to run", reported)
                .await?;
            return Ok(Verifying::Done(Some(v)));
        }
        let dispatch = final_dispatch(&ctx.op, &head);
        let made = ours(&dispatch).cloned();
        if let Some(check) = made {
            return Ok(Verifying::Done(Some(
                match serde_json::from_str::<HeadVerification>(&check.text) {
                    Ok(v) if v.head == head => v,
                    Ok(_) | Err(_) => {
                        let why = "commands not verified: the verifying job's results do not read";
                        self.verify_head_files(ctx, st, head, why, reported).await?
                    }
                },
            )));
        }
        let mut row = self.store.run(&dispatch).await?;
        // Dispatched without an answer naming the run: its name does.
        if row.as_ref().is_some_and(|r| r.run_id.is_none()) {
            let d = crate::engine::DispatchId(dispatch.clone());
            if let Some(run) = self.find_run(ctx, None, &d).await? {
                self.record_run(ctx, &d, run.id, &run.html_url, Some(head.clone()))
                    .await?;
                row = self.store.run(&dispatch).await?;
            }
        }
        if let Some(id) = row.as_ref().and_then(|r| r.run_id) {
            let over = repo.run(id).await?;
            return match over {
                Some(run) if run.status != "completed" => Ok(Verifying::Waiting),
                // Over with no results: what the service can read is
                // read, and the commands are said not verified, with where
                // to look.
                run => {
                    let why = match run {
                        Some(r) => format!(
                            "commands not verified: the final verification run ended {} without results ({})",
                            r.conclusion.as_deref().unwrap_or("unfinished"),
                            r.html_url
                        ),
                        None => "commands not verified: the final verification run is gone".into(),
                    };
                    let v = self
                        .verify_head_files(ctx, st, head, &why, reported)
                        .await?;
                    Ok(Verifying::Done(Some(v)))
                }
            };
        }
        if row.is_none() {
            if let Some(why) = self.dispatch_final(ctx, st, &head, &dispatch).await? {
                let v = self
                    .verify_head_files(ctx, st, head, &why, reported)
                    .await?;
                return Ok(Verifying::Done(Some(v)));
            }
        }
        Ok(Verifying::Waiting)
    }

    /// Dispatches the agent workflow as the final verification of `head`:
    /// sprint `final`, no agent, and the sprints to check (with their
    /// branches, where each landed is found from) as the `prompt`. Some
    /// reason when GitHub refused it.
    async fn dispatch_final(
        &self,
        ctx: &OpContext,
        st: &OperationState,
        head: &str,
        dispatch: &str,
    ) -> Result<Option<String>, OpError> {
        let repo = self.repo(ctx);
        let order = FinalOrder {
            sprints: st
                .units
                .iter()
                .flat_map(|u| {
                    u.sprints
                        .iter()
                        .filter(|s| s.completion.is_some())
                        .map(move |s| FinalSprint {
                            unit: u.name.clone(),
                            sprint: s.id.clone(),
                            branch: sprint_branch(&ctx.op, &u.slug, s.id.as_str()),
                        })
                })
                .collect(),
        };
        let branch = integration_branch(&ctx.op);
        let inputs = json!({
            "dispatch_id": dispatch,
            "plan": ctx.plan_path,
            "unit": "*",
            "directory": ".",
            "sprint": FINAL_SPRINT,
            "sprint_name": "final verification",
            "attempt": "1",
            "model": "none",
            "max_turns": "0",
            "prompt": serde_json::to_string(&order).map_err(crate::store::sql::SqlError::from)?,
            "branch": branch,
        });
        // Recorded after GitHub took it: a crash in between dispatches it
        // again, which costs a runner and no agent (the first run's check
        // run is taken), where recording first would wait for ever on a
        // run that was never made.
        let recorded = |run_id: Option<i64>, html_url: Option<String>| RunRow {
            dispatch: dispatch.to_string(),
            op: ctx.op.clone(),
            base_sha: Some(head.to_string()),
            run_id,
            html_url,
            ..Default::default()
        };
        match repo.dispatch(&ctx.workflow, &branch, inputs).await {
            Ok(Some((id, url))) => {
                self.store.put_run(&recorded(Some(id), Some(url))).await?;
                Ok(None)
            }
            // An older GitHub: the run is found by its name.
            Ok(None) => {
                self.store.put_run(&recorded(None, None)).await?;
                Ok(None)
            }
            // Refused (the workflow is gone or older than this supervisor):
            // the report is not held for ever on it.
            Err(crate::github::GitHubError::Http { status, .. }) if status == 404 || status == 422 => {
                Ok(Some(format!(
                    "commands not verified: GitHub refused to dispatch `.github/workflows/{}` for the final verification ({status}); copy Sprint Supervisor's `.github/workflows/supervise-agent.yml` over it",
                    ctx.workflow
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The final head's re-verification as far as the service may go:
    /// every file criterion of every completed sprint read again at `head`
    /// through the contents API (one listing, one read per file a `contains`
    /// names); a command criterion is listed as not run, for the reason
    /// `commands` gives. The result is also a check run
    /// `supervise: final verification` on that head, unless `reported`: it
    /// is there already.
    async fn verify_head_files(
        &self,
        ctx: &OpContext,
        st: &OperationState,
        head: String,
        commands: &str,
        reported: bool,
    ) -> Result<HeadVerification, OpError> {
        use crate::engine::done_before::{self, Found};
        let repo = self.repo(ctx);
        let branch = integration_branch(&ctx.op);
        // One listing of the head answers every `exists` (and every file
        // that is not there); only a `contains` of a file that is there is
        // read.
        let listed = repo.paths_at(&head).await?;
        let mut files: std::collections::HashMap<String, Option<Vec<u8>>> = Default::default();
        let mut checks = Vec::new();
        for (unit, sprint, c) in st.completed_criteria() {
            let (outcome, detail) = match &c.assertion {
                Some(a) => {
                    let path = done_before::a_path(a).to_string();
                    let known = listed
                        .as_ref()
                        .map(|l| l.contains(path.trim_end_matches('/')));
                    if !files.contains_key(&path) {
                        let read = match (known, a) {
                            (Some(false), _) => None,
                            (Some(true), crate::plan::Assertion::FileExists { .. }) => {
                                Some(Vec::new())
                            }
                            _ => repo
                                .file(&path, Some(&head))
                                .await?
                                .map(|(text, _)| text.into_bytes()),
                        };
                        files.insert(path.clone(), read);
                    }
                    let bytes = files.get(&path).cloned().flatten();
                    done_before::check_assertion(a, |_| match &bytes {
                        Some(b) => Found::File(b.clone()),
                        None => Found::Missing,
                    })
                    .unwrap_or((engine::CriterionOutcome::Failed, "could not be read".into()))
                }
                None => (engine::CriterionOutcome::Unverified, commands.to_string()),
            };
            checks.push(engine::HeadCheck {
                unit: unit.to_string(),
                sprint: sprint.clone(),
                result: engine::CriterionResult {
                    line: c.line,
                    text: c.text.clone(),
                    outcome,
                    detail,
                },
                broken_by: None,
            });
        }
        let verification = engine::HeadVerification {
            branch,
            head: head.clone(),
            checks,
        };
        let how = format!(
            "Every exit criterion of every sprint, on the final integration head. Files are read again here; a command is not ({commands})."
        );
        // The files at one head read the same every time: a step that runs
        // again (the final report failed after this, and is retried) makes
        // no second check run of them.
        if reported {
            return Ok(verification);
        }
        let (conclusion, title, summary) =
            crate::report::posts::final_check(&verification, &how, "☐ not run here:");
        repo.create_check(json!({
            "name": FINAL_CHECK,
            "head_sha": head,
            "status": "completed",
            "conclusion": conclusion,
            "external_id": ctx.op,
            "output": { "title": title, "summary": summary },
        }))
        .await?;
        Ok(verification)
    }
}
