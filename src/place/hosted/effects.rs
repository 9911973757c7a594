//! Carrying the engine's effects out on GitHub, each idempotent: dispatches
//! (adopting a run that already carries the id), cancels, merges, build gates,
//! notices, and the final report.

use super::{GitHubExecutor, OpContext, OpError, Operations};
use crate::contract::BOOKKEEPING;
use crate::contract::{integration_branch, prompt_path, sprint_branch};
use crate::drive::{EffectKey, Entry, Outcome};
use crate::engine::workflow::{Phases, Workflow};
use crate::engine::{self, DispatchId, Effect, Input, NoticeKind, OperationState};
use crate::github::repo::Merge;
use crate::github::repo::{Repo, WorkflowRun};
use crate::github::GitHubError;
use crate::report;
use crate::settings::MergeMode;
use crate::store::sql::{Admission, Admitted, Caps};
use crate::store::sql::{RunRow, SqlError};
use serde_json::json;
use std::collections::HashSet;
use std::time::Instant;

/// Which outbox entries may have been carried out before, wholly or in
/// part: trying one again may follow an answer that was lost, so what it
/// makes is looked for before it is made again.
#[derive(Debug)]
pub(super) struct Carried {
    /// The log's last decision when this replica read it: entries up to it
    /// may have been carried out by an earlier process.
    loaded_seq: u64,
    /// Entries this process has started to carry out.
    tried: HashSet<EffectKey>,
}

impl Carried {
    /// The log as read up to `seq` (negative: nothing read).
    pub fn new(seq: i64) -> Carried {
        Carried {
            loaded_seq: seq.max(0) as u64,
            tried: HashSet::new(),
        }
    }

    /// Whether an earlier try of this entry may have had effects; it counts
    /// as tried from now on.
    pub fn may_have_run(&mut self, key: EffectKey) -> bool {
        key.seq <= self.loaded_seq || !self.tried.insert(key)
    }
}

impl GitHubExecutor<'_> {
    pub(super) async fn effect(
        &mut self,
        state: Option<&OperationState>,
        p: &Entry,
    ) -> Result<Outcome, OpError> {
        let ctx = self.place.ctx.clone();
        let ops = self.ops;
        let repo = ops.repo(&ctx);
        let op = &ctx.op;
        let slug =
            |unit: &str| state.map_or_else(|| crate::text::slug(unit), |st| st.unit_slug(unit));
        match &p.effect {
            Effect::Dispatch(order) => {
                let may_have_run = self.place.carried.may_have_run(p.key);
                self.dispatch(state, order, may_have_run).await
            }
            Effect::Cancel { dispatch, force } => {
                let run = match ops.store.run(&dispatch.0).await?.and_then(|r| r.run_id) {
                    Some(id) => Some(id),
                    None => ops.find_run(&ctx, state, dispatch).await?.map(|r| r.id),
                };
                // A cancel first, always; a run that ignores it is force-cancelled
                // by reconciliation (`force` only halves the grace).
                if let Some(id) = run {
                    repo.cancel(id, false).await?;
                    let grace = ops.timings.force_cancel_after / if *force { 2 } else { 1 };
                    self.place.runs.cancelled(id, Instant::now() + grace);
                }
                Ok(Outcome::Done(vec![]))
            }
            Effect::Integrate {
                unit,
                sprint,
                dispatch,
            } => {
                let branch = sprint_branch(op, &slug(unit), sprint.as_str());
                let merged = vec![Input::Integrated {
                    unit: unit.clone(),
                    sprint: sprint.clone(),
                }];
                let row = ops.store.run(&dispatch.0).await?;
                // A sprint found done before its dispatch made no run and no
                // branch: the integration branch holds its work already.
                if row.as_ref().is_none_or(|r| r.run_id.is_none())
                    && repo.branch_sha(&branch).await?.is_none()
                    && found_done_before_dispatch(state, dispatch)
                {
                    return Ok(Outcome::Done(merged));
                }
                let number = match row.as_ref().and_then(|r| r.pull) {
                    Some(n) => n,
                    None => {
                        let Some(pr) = repo.pull_for(&branch).await? else {
                            return Err(GitHubError::NeedsPerson(format!(
                                "no pull request from {branch}"
                            ))
                            .into());
                        };
                        if pr.merged {
                            return Ok(Outcome::Done(merged));
                        }
                        pr.number
                    }
                };
                let needed = ctx.required_approvals.map_or(1, |n| n.get());
                let verified = row.and_then(|r| r.verified_sha);
                let after_review = merge_mode(&ctx, state, unit, sprint) == MergeMode::AfterReview;
                let latest = match after_review {
                    true => repo.latest_reviews(number).await?,
                    false => Vec::new(),
                };
                let waiting = super::reviews::sprint_run(state, unit, sprint)
                    .filter(|sp| sp.awaiting_merge());
                if let Some(sp) = waiting.filter(|_| after_review) {
                    // A reviewer who may write asked for changes: a fix round
                    // instead of this merge (the round's own merge follows).
                    let asked = self
                        .place
                        .reviews
                        .changes_asked(
                            &repo,
                            (op, number),
                            (unit, sprint),
                            &latest,
                            &sp.reviews_seen,
                        )
                        .await?;
                    if let Some(asked) = asked {
                        return Ok(Outcome::Done(vec![asked]));
                    }
                    self.place
                        .reviews
                        .answer_round(&repo, op, number, sp, dispatch, verified.as_deref())
                        .await?;
                }
                if after_review && !approved_by_writers(&repo, &latest, needed).await? {
                    // Whoever must review is told once (the status comment
                    // says so all along); the delivery id is the merge's, so
                    // a receiver drops the notice a restart sends again.
                    if self.place.merges.review_told.insert(dispatch.clone()) {
                        let text = format!(
                            "{unit} Sprint {sprint} is verified and waits for a review: {} of pull request #{number} by people who may write merge it.",
                            crate::text::count(needed as usize, "approval")
                        );
                        let kind = NoticeKind::AwaitingReview;
                        let mut notice =
                            crate::notify::Notice::new(op, p.key, kind, Some(unit), &text);
                        notice.repository = Some(ctx.repo.clone());
                        notice.link =
                            Some(format!("{}/{}/pull/{number}", ops.gh.web_url(), ctx.repo));
                        ops.notifier.tell(kind, notice);
                    }
                    return Ok(Outcome::Wait(vec![]));
                }
                // Merged at the head that was verified: a branch moved since
                // is refused by GitHub (409) rather than merged unverified.
                match repo.merge(number, verified.as_deref()).await? {
                    Merge::Merged(head) => {
                        // The integration branch's head is now the merge
                        // commit: the next dispatch starts from it unread.
                        self.place.merges.merged(dispatch, head);
                        Ok(Outcome::Done(merged))
                    }
                    Merge::Conflict => Err(GitHubError::NeedsPerson(format!(
                        "pull request #{} of {unit} Sprint {sprint} no longer merges into {}; resolve the conflict on its branch and merge it by hand",
                        number,
                        integration_branch(op)
                    ))
                    .into()),
                    Merge::HeadMoved => Err(GitHubError::NeedsPerson(format!(
                        "the branch of {unit} Sprint {sprint} (pull request #{}) changed after it was verified at {}; it was not merged. Check the new commits, then merge it by hand or run the sprint again",
                        number,
                        verified.as_deref().map_or("?", |s| &s[..s.len().min(7)])
                    ))
                    .into()),
                }
            }
            Effect::RunGate { gate, units, .. } => {
                let head = match self.place.merges.head.clone() {
                    Some(h) => h,
                    None => repo
                        .branch_sha(&integration_branch(op))
                        .await?
                        .unwrap_or_default(),
                };
                let Some(checks) = ops
                    .ci_on(&mut self.place.runs, &repo, &head)
                    .await?
                    .map(|c| c.ci)
                else {
                    return Ok(Outcome::Wait(vec![]));
                };
                let red: Vec<String> = checks
                    .iter()
                    .filter(|c| !c.green())
                    .map(|c| format!("{}: {}", c.name, c.conclusion.as_deref().unwrap_or("?")))
                    .collect();
                let short = &head[..head.len().min(7)];
                let output = if checks.is_empty() {
                    format!("no CI checks reported on {short}")
                } else if red.is_empty() {
                    format!("{} check(s) green on {short}", checks.len())
                } else {
                    format!("failing on {short}: {}", red.join(", "))
                };
                // Charged where CI's results on the phase's merges say the
                // failure came in (see gate.rs); else the output's names
                // decide.
                let blame = match state {
                    Some(st) if !red.is_empty() => ops.gate_blame(&ctx, st, units).await?,
                    _ => crate::engine::GateBlame::Unknown,
                };
                Ok(Outcome::Done(vec![Input::GateResult {
                    gate: *gate,
                    passed: red.is_empty(),
                    output,
                    blame,
                }]))
            }
            // Conditions are commands, and the service never runs a repository's
            // commands: the condition counts as not met, and after the polls a
            // person is asked (§9).
            Effect::PollCondition { unit, sprint } => {
                Ok(Outcome::Done(vec![Input::ConditionPolled {
                    unit: unit.clone(),
                    sprint: sprint.clone(),
                    met: false,
                    error: None,
                    criteria: Vec::new(),
                }]))
            }
            Effect::Notify { kind, unit, text } => {
                let body = format!(
                    "{}{}",
                    report::notice_prefix(*kind),
                    report::posts::as_comment_commands(text)
                );
                // Sent once its effect is carried out; the delivery id lets a
                // receiver drop the same notice after a restart.
                let mut notice =
                    crate::notify::Notice::new(op, p.key, *kind, unit.as_deref(), &body);
                notice.repository = Some(ctx.repo.clone());
                notice.link = Some(format!(
                    "{}/{}/issues/{}",
                    ops.gh.web_url(),
                    ctx.repo,
                    ctx.issue
                ));
                ops.notifier.tell(*kind, notice);
                // One notice per operation says that agents wait: edited
                // when the reason changes, never a comment per held sprint.
                if *kind == NoticeKind::Held {
                    let marker = report::posts::notice_marker(op, "held");
                    repo.upsert_comment(ctx.issue, Some(&ctx.started_at), &marker, &body)
                        .await?;
                    return Ok(Outcome::Done(vec![]));
                }
                let marker = report::posts::notice_marker(op, &p.key.to_string());
                let acts = matches!(kind, NoticeKind::Blocked | NoticeKind::VerificationFailed);
                let mention = ctx.mention.as_deref().filter(|_| acts);
                repo.comment_once_to(ctx.issue, Some(&ctx.started_at), &marker, &body, mention)
                    .await?;
                // Said on the unit's issue too: whoever follows it must act.
                if let (NoticeKind::Blocked | NoticeKind::VerificationFailed, Some(u)) =
                    (kind, unit)
                {
                    let issues = ops.store.unit_issues(op).await?;
                    if let Some(ui) = issues.iter().find(|i| &i.unit == u) {
                        repo.comment_once(ui.number, Some(&ctx.started_at), &marker, &body)
                            .await?;
                    }
                }
                Ok(Outcome::Done(vec![]))
            }
            Effect::NamePlan { name } => {
                let committed = repo
                    .edit_file(
                        &integration_branch(op),
                        &ctx.plan_path,
                        |text| crate::plan::frontmatter::with_feature_name(text, name),
                        &format!("supervise: the operation is named {name}"),
                    )
                    .await?;
                // The first dispatches branch from the named plan.
                if committed.is_some() {
                    self.place.merges.head = committed;
                }
                Ok(Outcome::Done(vec![]))
            }
            Effect::Refund { dispatch } => {
                ops.store.spend_refunded(&dispatch.0).await?;
                Ok(Outcome::Done(vec![]))
            }
            Effect::PublishStatus => {
                self.place.status.touch();
                Ok(Outcome::Done(vec![]))
            }
            Effect::FinalReport => {
                let Some(st) = state else {
                    return Ok(Outcome::Done(vec![]));
                };
                // The verdict is about the head a person will merge: its
                // files are read again before the report (once: a report
                // sent again after a crash keeps the first reading).
                let verification = match &st.head_verification {
                    Some(v) => Some(v.clone()),
                    None => match ops.verify_head(&ctx, st).await? {
                        super::head::Verifying::Done(v) => v,
                        // The verifying job is still at it: the report
                        // waits for its check run.
                        super::head::Verifying::Waiting => return Ok(Outcome::Wait(vec![])),
                    },
                };
                let mut shown = st.clone();
                if let Some(v) = &verification {
                    engine::apply_to(
                        &mut shown,
                        &engine::Event::HeadVerified {
                            verification: v.clone(),
                            at: chrono::Utc::now(),
                        },
                    );
                }
                ops.final_report(&ctx, &shown, &p.key.to_string()).await?;
                Ok(Outcome::Done(
                    verification
                        .filter(|_| st.head_verification.is_none())
                        .map(|verification| Input::HeadVerified { verification })
                        .into_iter()
                        .collect(),
                ))
            }
        }
    }

    /// Launches one attempt: one workflow dispatch on the integration branch,
    /// with the prompt and the sprint branch among its inputs. The sprint's
    /// pull request is opened when its first attempt is verified (GitHub
    /// opens none without a commit to show).
    async fn dispatch(
        &mut self,
        state: Option<&OperationState>,
        order: &engine::DispatchOrder,
        may_have_run: bool,
    ) -> Result<Outcome, OpError> {
        let ctx = self.place.ctx.clone();
        let ops = self.ops;
        let repo = ops.repo(&ctx);
        let d = &order.dispatch;
        let active = state
            .and_then(|st| st.find_dispatch(d).map(|(u, s)| &st.units[u].sprints[s]))
            .and_then(|s| s.active.as_ref());
        let held = active.is_some_and(|a| a.held.is_some());
        // Launched after waiting: the attempt's clocks start now.
        let released = || -> Vec<Input> {
            if held {
                vec![Input::DispatchReleased {
                    dispatch: d.clone(),
                }]
            } else {
                Vec::new()
            }
        };
        // Never twice: a run that carries this id already is adopted.
        if ops
            .store
            .run(&d.0)
            .await?
            .is_some_and(|r| r.run_id.is_some())
        {
            return Ok(Outcome::Done(released()));
        }
        if may_have_run {
            if let Some(run) = ops.find_run(&ctx, state, d).await? {
                ops.record_run(&ctx, d, run.id, &run.html_url, None).await?;
                return Ok(Outcome::Done(released()));
            }
        }
        // Cancelled (killall, a stop that ran out) while it waited: never launched.
        if active.is_some_and(|a| a.cancel.is_some()) {
            ops.store.spend_refunded(&d.0).await?;
            return Ok(Outcome::Done(vec![Input::DispatchFailed {
                dispatch: d.clone(),
                error: "cancelled before it was launched".into(),
            }]));
        }
        if let Some(report) = self.look_before(state, order).await? {
            return Ok(Outcome::Done(vec![Input::AgentFinished {
                dispatch: d.clone(),
                report,
            }]));
        }
        // Charged at the operator's prices: a repository whose settings made
        // every model free would otherwise pass the installation's cap.
        let cost = ops.limits.cost(order.tier);
        let admitted = ops
            .store
            .admit(&Admission {
                dispatch: &d.0,
                installation: ctx.installation as i64,
                repo: &ctx.repo,
                op: &ctx.op,
                model: order.tier.as_str(),
                cost,
                usd: ops.limits.expected_usd(order.tier, state),
                caps: Caps {
                    installation_daily: ops.limits.daily_budget,
                    repo_daily: ctx.daily_budget,
                    installation_daily_usd: ops.limits.daily_budget_usd,
                    repo_daily_usd: ctx.daily_budget_usd,
                    installation_agents: ops.limits.agents,
                },
                waiting_expires_ms: (ops.timings.reconcile.as_millis() as i64)
                    .saturating_mul(3)
                    .saturating_add(30_000),
            })
            .await?;
        if let Admitted::Held {
            reason,
            until,
            kind,
        } = admitted
        {
            return Ok(Outcome::Wait(vec![Input::DispatchHeld {
                dispatch: d.clone(),
                reason,
                until,
                kind,
            }]));
        }
        let first_of_sprint = state
            .and_then(|st| st.find_dispatch(d).map(|(u, s)| &st.units[u].sprints[s]))
            .is_some_and(|s| s.dispatches == 1);
        let unit_slug = state.map_or_else(
            || crate::text::slug(&order.unit),
            |st| st.unit_slug(&order.unit),
        );
        let branch = sprint_branch(&ctx.op, &unit_slug, order.sprint.as_str());
        let integration = integration_branch(&ctx.op);
        // Work a workflow added, or a review of the final pull request (a
        // unit read from no file: line 0), is in no plan file: its
        // definition goes on the sprint branch, for the agent workflow's
        // verifying job.
        let spec = state
            .and_then(|st| {
                let unit = st.plan.unit(&order.unit)?;
                (st.workflow.is_some() || unit.line == 0).then_some(unit)
            })
            .map(|unit| crate::contract::SprintSpec {
                unit: unit.clone(),
                answer_file: order.answer_file.clone(),
            });
        let inline_prompt = crate::contract::prompt_input(&order.prompt);
        let prompt_file = prompt_path(&unit_slug, order.sprint.as_str());
        // Usually nothing is made before the run: the runner cuts the sprint
        // branch from the integration head it is dispatched on (or takes the
        // branch an earlier attempt left), and the prompt is an input. Only a
        // workflow's sprint definition or a prompt too long for the inputs is
        // committed on the branch first.
        if spec.is_some() || inline_prompt.is_none() {
            let fresh = first_of_sprint && !may_have_run;
            let made_now = self.ensure_sprint_branch(&repo, &branch, fresh).await?;
            let commit = |path: String, text: String, message: String| {
                let repo = &repo;
                let branch = &branch;
                async move {
                    if made_now {
                        repo.create_file(branch, &path, &text, &message).await
                    } else {
                        repo.put_file(branch, &path, &text, &message).await
                    }
                }
            };
            if let Some(spec) = &spec {
                let text = serde_json::to_string_pretty(spec).map_err(SqlError::from)?;
                commit(
                    crate::contract::sprint_spec_path(&d.0),
                    text,
                    format!("supervise: the sprint {} of {}", order.sprint, order.unit),
                )
                .await?;
            }
            if inline_prompt.is_none() {
                commit(
                    prompt_file.clone(),
                    order.prompt.clone(),
                    format!(
                        "supervise: prompt for {} Sprint {} (attempt {}, {})",
                        order.unit, order.sprint, order.attempt, order.model_id
                    ),
                )
                .await?;
            }
        }
        let plan_input = match &spec {
            Some(_) => crate::contract::sprint_spec_path(&d.0),
            None => ctx.plan_path.clone(),
        };
        let prompt_input = match inline_prompt {
            Some(text) => text.to_string(),
            None => format!("@{prompt_file}"),
        };
        let base_sha = self.place.merges.head.clone();
        ops.store
            .put_run(&RunRow {
                dispatch: d.0.clone(),
                op: ctx.op.clone(),
                base_sha: base_sha.clone(),
                ..Default::default()
            })
            .await?;
        let inputs = json!({
            "dispatch_id": d.0,
            "plan": plan_input,
            "unit": order.unit,
            "directory": order.directory.as_deref().unwrap_or("."),
            "sprint": order.sprint.as_str(),
            "sprint_name": order.sprint_name,
            "attempt": order.attempt.to_string(),
            "model": order.model_id,
            "max_turns": order.max_turns.to_string(),
            "prompt": prompt_input,
            "branch": branch,
        });
        let dispatched = repo.dispatch(&ctx.workflow, &integration, inputs).await;
        if dispatched.is_ok() && admitted == Admitted::Now {
            // What is paid for, per installation, repository and model, for
            // `/metrics`: once per dispatch, however often it is carried out.
            let labels = [
                ("installation", ctx.installation.to_string()),
                ("repository", ctx.repo.clone()),
                ("model", order.tier.as_str().to_string()),
            ];
            metrics::counter!("supervise_dispatches_total", &labels).increment(1);
            metrics::counter!("supervise_spend_total", &labels).increment(cost);
        }
        match dispatched {
            Ok(Some((id, url))) => {
                ops.record_run(&ctx, d, id, &url, base_sha).await?;
                Ok(Outcome::Done(released()))
            }
            // An older GitHub without run details: the run is found by its name.
            Ok(None) => {
                if let Some(run) = ops.find_run(&ctx, state, d).await? {
                    ops.record_run(&ctx, d, run.id, &run.html_url, None).await?;
                }
                Ok(Outcome::Done(released()))
            }
            Err(GitHubError::Http { status, body, .. }) if status == 404 || status == 422 => {
                ops.store.spend_refunded(&d.0).await?;
                // A copy of the template from before the prompt and branch
                // became inputs does not declare them.
                let what_to_do = if body.contains("Unexpected inputs") {
                    "The workflow is older than this supervisor: copy Sprint Supervisor's `.github/workflows/supervise-agent.yml` over it"
                } else {
                    "Add the agent workflow (see Sprint Supervisor's templates) or set `workflow:` in .github/supervise.yml"
                };
                // GitHub's reason, without the JSON around it.
                let reason = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_string))
                    .unwrap_or(body);
                Ok(Outcome::Done(vec![Input::DispatchFailed {
                    dispatch: d.clone(),
                    error: format!(
                        "GitHub refused to dispatch `.github/workflows/{}` ({status}): {reason}. {what_to_do}",
                        ctx.workflow
                    ),
                }]))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The look before a fresh sprint's agent, as far as the service may
    /// look: a sprint checked only by files has them read at the integration
    /// head (which its branch would be cut from) through the contents API,
    /// one at a time, stopping at the first that fails. When all pass, the
    /// work is there: the engine completes the sprint unpaid, and nothing is
    /// dispatched or charged. A sprint with a command criterion is
    /// dispatched (no repository command runs here), as is one whose file
    /// does not read.
    async fn look_before(
        &mut self,
        state: Option<&OperationState>,
        order: &engine::DispatchOrder,
    ) -> Result<Option<engine::AgentReport>, OpError> {
        use crate::engine::done_before::{self, Found};
        let Some(st) = state else { return Ok(None) };
        if order.kind != engine::DispatchKind::Fresh || st.workflow.is_some() {
            return Ok(None);
        }
        let Some((u, s)) = st.find_dispatch(&order.dispatch) else {
            return Ok(None);
        };
        let sprint = &st.plan.work_units[u].sprints[s];
        if !done_before::may_be_found_done(sprint)
            || sprint.exit_criteria.iter().any(|c| c.assertion.is_none())
        {
            return Ok(None);
        }
        let repo = self.ops.repo(&self.place.ctx);
        let integration = integration_branch(&self.place.ctx.op);
        let head = match self.place.merges.head.clone() {
            Some(h) => h,
            None => match repo.branch_sha(&integration).await? {
                Some(h) => h,
                None => return Ok(None),
            },
        };
        // Still the starting commit: the start's check judged the unit's
        // leading sprints there, and a sprint after one an agent did starts
        // from that agent's merge, which moved the head.
        if self.place.ctx.start_head.as_deref() == Some(head.as_str()) {
            return Ok(None);
        }
        let mut results = Vec::new();
        for c in &sprint.exit_criteria {
            let Some(a) = &c.assertion else {
                return Ok(None);
            };
            let path = done_before::a_path(a);
            let bytes = match repo.file(path, Some(&head)).await {
                Ok(found) => found.map(|(text, _)| text.into_bytes()),
                Err(e) => {
                    tracing::warn!(%path, error = %e, "reading a criterion's file before a dispatch; dispatching");
                    return Ok(None);
                }
            };
            let read = |_: &str| match &bytes {
                Some(b) => Found::File(b.clone()),
                None => Found::Missing,
            };
            match done_before::check_assertion(a, read) {
                Some((engine::CriterionOutcome::Passed, detail)) => {
                    results.push(engine::CriterionResult {
                        line: c.line,
                        text: c.text.clone(),
                        outcome: engine::CriterionOutcome::Passed,
                        detail,
                    })
                }
                _ => return Ok(None),
            }
        }
        let short = crate::text::short_id(&head);
        Ok(Some(engine::AgentReport {
            exit_code: Some(0),
            output_tail: format!(
                "no agent was launched: every exit criterion's file is on {integration} at {short}"
            ),
            turns_used: None,
            usage: None,
            evidence: engine::Evidence {
                criteria: results,
                found_done: Some(engine::FoundDone {
                    by: format!("the integration branch at {short} (an earlier sprint's work, or a commit before the operation)"),
                    head,
                    failed_at_start: Vec::new(),
                }),
                ..Default::default()
            },
        }))
    }

    /// Makes sure the sprint branch exists before something is committed on
    /// it: made from the integration head without looking first when no
    /// earlier try can have made it (`fresh`); true when made now.
    async fn ensure_sprint_branch(
        &mut self,
        repo: &Repo<'_>,
        branch: &str,
        fresh: bool,
    ) -> Result<bool, OpError> {
        if !fresh && repo.branch_sha(branch).await?.is_some() {
            return Ok(false);
        }
        let integration = integration_branch(&self.place.ctx.op);
        let base = match self.place.merges.head.clone() {
            Some(h) => h,
            None => repo.branch_sha(&integration).await?.ok_or_else(|| {
                GitHubError::NeedsPerson(format!("the integration branch {integration} is gone"))
            })?,
        };
        self.place.merges.head = Some(base.clone());
        Ok(repo.create_branch(branch, &base).await?)
    }
}

impl Operations {
    /// Looks for a run carrying the dispatch id among the workflow's recent runs.
    pub(super) async fn find_run(
        &self,
        ctx: &OpContext,
        state: Option<&OperationState>,
        d: &DispatchId,
    ) -> Result<Option<WorkflowRun>, OpError> {
        let since = state
            .and_then(|st| st.find_dispatch(d).map(|(u, s)| &st.units[u].sprints[s]))
            .and_then(|s| s.active.as_ref())
            .map(|a| a.dispatched_at - chrono::Duration::minutes(5))
            .unwrap_or_else(|| chrono::Utc::now() - chrono::Duration::days(1));
        let runs = self
            .repo(ctx)
            .runs(
                &ctx.workflow,
                &since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            )
            .await?;
        Ok(runs.into_iter().find(|r| r.carries(&d.0)))
    }

    pub(super) async fn record_run(
        &self,
        ctx: &OpContext,
        d: &DispatchId,
        id: i64,
        url: &str,
        base: Option<String>,
    ) -> Result<(), OpError> {
        self.store
            .put_run(&RunRow {
                dispatch: d.0.clone(),
                op: ctx.op.clone(),
                run_id: Some(id),
                html_url: Some(url.to_string()),
                base_sha: base,
                ..Default::default()
            })
            .await?;
        Ok(())
    }

    pub(super) async fn final_report(
        &self,
        ctx: &OpContext,
        st: &OperationState,
        key: &str,
    ) -> Result<(), OpError> {
        if let Some(Workflow::Phases(phases)) = &st.workflow {
            if let (Some(doc), Some(target)) = (&phases.document, &phases.plan_target) {
                return self.propose_breakdown(ctx, st, doc, target, key).await;
            }
        }
        let repo = self.repo(ctx);
        let integration = integration_branch(&ctx.op);
        let summary = report::final_summary(st, &report::complete_file_name(st));
        // One final comment, edited when the operation completes again (a
        // review of the final pull request asked for changes, and the
        // whole plan was verified again on the new head).
        let marker = report::posts::notice_marker(&ctx.op, "final");
        repo.upsert_comment(ctx.issue, Some(&ctx.started_at), &marker, &summary)
            .await?;
        // The supervisor's bookkeeping (results records, long prompts, sprint
        // specs) served the sprints; the default branch gets the work.
        repo.remove_paths(
            &integration,
            &BOOKKEEPING,
            "supervise: the supervisor's bookkeeping stays out of the final pull request",
        )
        .await?;
        let now = chrono::Utc::now();
        let complete = report::complete_file_name(st);
        repo.put_file(
            &integration,
            &complete,
            &report::complete_md(st, now),
            &format!("supervise: {complete}"),
        )
        .await?;
        let no_logs = |_: &DispatchId| String::new();
        repo.put_file(
            &integration,
            "SUPERVISOR_STATE.md",
            &report::supervisor_state_md(st, &no_logs),
            "supervise: SUPERVISOR_STATE.md",
        )
        .await?;
        // The final pull request is opened only on a head that passed: a
        // regression is mended on the integration branch first.
        if st
            .head_verification
            .as_ref()
            .is_some_and(|v| v.failures().next().is_some())
        {
            return Ok(());
        }
        let body = format!(
            "Operation `{}` (#{}) is complete: every sprint was verified and merged here.\n\n{summary}\n\nSee `{complete}` for the final verification and cadence analysis.",
            ctx.op, ctx.issue
        );
        repo.ensure_pull(
            &integration,
            &ctx.default_branch,
            &format!("Sprint Supervisor: {}", st.name),
            &body,
        )
        .await?;
        Ok(())
    }

    /// A breakdown's end: the accepted plan proposed at `target` in a pull
    /// request of its own from the default branch (the integration branch
    /// holds only the agents' drafts), with the coverage table that shows
    /// every requirement in a sprint.
    async fn propose_breakdown(
        &self,
        ctx: &OpContext,
        st: &OperationState,
        doc: &str,
        target: &str,
        key: &str,
    ) -> Result<(), OpError> {
        use crate::plan::tools::breakdown as bd;
        let repo = self.repo(ctx);
        let Some(accepted) = Phases::accepted_plan(st) else {
            return Ok(());
        };
        let (plan, attempts) = (accepted.text, accepted.attempts);
        let coverage = bd::accept(doc, &plan, accepted.max_turns).unwrap_or_default();
        let title = crate::plan::parse(&plan, target)
            .map(|p| p.title)
            .unwrap_or_else(|_| "the plan".into());
        let summary = format!(
            "## Breakdown Complete\n\nMade by a planning agent in {}, accepted by the breakdown's checks (the reader reads it, every requirement is in a sprint, a machine check wherever one can be written, no sprint over the turn budget).\n\n### Coverage\n\n{}",
            crate::text::count(attempts as usize, "attempt"),
            bd::coverage_table(&coverage)
        );
        let number = repo
            .propose(
                &format!("supervise-breakdown/issue-{}", ctx.issue),
                &[(target, plan.as_str())],
                &format!("Plan for {title}"),
                &format!("{summary}\nProposed by `/supervise breakdown` on #{} (operation `{}`). Review the units, sprints and exit criteria, change what you like on this branch, and merge when it says what you want built; then `/supervise start`.\n", ctx.issue, ctx.op),
            )
            .await?;
        let marker = report::posts::notice_marker(&ctx.op, &format!("final-{key}"));
        repo.comment_once(
            ctx.issue,
            Some(&ctx.started_at),
            &marker,
            &format!("{summary}\nProposed as `{target}` in pull request #{number}."),
        )
        .await?;
        Ok(())
    }
}

/// Whether at least `needed` people who may write to the repository approve
/// the pull request and none of them asks for changes (each by their
/// latest review, as GitHub counts them): anyone can review a public
/// repository's pull request, and an approval by someone who could not
/// merge it lets nothing merge here.
async fn approved_by_writers(
    repo: &Repo<'_>,
    latest: &[(String, crate::github::answers::Review)],
    needed: u32,
) -> Result<bool, GitHubError> {
    let mut writers = 0;
    for (login, review) in latest {
        let counts = matches!(review.state.as_str(), "APPROVED" | "CHANGES_REQUESTED");
        if !counts || !super::may_write(repo, login).await? {
            continue;
        }
        if review.state == "CHANGES_REQUESTED" {
            return Ok(false);
        }
        writers += 1;
    }
    Ok(writers >= needed)
}

/// How a sprint's pull request is merged: as the repository's settings say;
/// where they say nothing, immediately — but after an approving review for
/// a sprint completed on the agent's word, which no machine checked.
fn merge_mode(
    ctx: &OpContext,
    state: Option<&OperationState>,
    unit: &str,
    sprint: &crate::plan::SprintId,
) -> MergeMode {
    if let Some(mode) = ctx.merge {
        return mode;
    }
    // (Work without a plan is judged by its workflow, which reads what
    // each agent hands back: not a sprint a person reviews.)
    let on_word = state
        .filter(|st| st.workflow.is_none())
        .and_then(|st| {
            let u = st.unit_index(unit)?;
            st.units[u]
                .sprints
                .iter()
                .find(|s| &s.id == sprint)?
                .completion
                .as_ref()
        })
        .is_some_and(|c| c.on_agents_word().is_some());
    if on_word {
        MergeMode::AfterReview
    } else {
        MergeMode::Immediately
    }
}

/// Whether the attempt `d` ended with its sprint found done before an agent
/// was launched (so it has no run, branch or pull request to merge).
fn found_done_before_dispatch(state: Option<&OperationState>, d: &DispatchId) -> bool {
    state
        .and_then(|st| {
            st.units.iter().flat_map(|u| &u.sprints).find_map(|s| {
                s.history
                    .iter()
                    .find(|h| &h.dispatch == d)
                    .map(|h| h.outcome == engine::DONE_BEFORE_DISPATCH)
            })
        })
        .unwrap_or(false)
}
