//! What an operation is told: by people, `start` and the other commands
//! (parsed and authorised by `handle`), `status`; by GitHub, the
//! `workflow_run` webhook.

use super::runs::AwaitingCi;
use super::{Live, OpContext, OpError, Operations, Origin, WorkflowKind, DEFAULT_WORKFLOW};
use crate::commands::OnOperation;
use crate::contract::integration_branch;
use crate::drive::Decided;
use crate::engine::done_before::{self, Found, StartingCommit};
use crate::engine::estimate::{CostModel, HISTORY};
use crate::engine::workflow::Workflow;
use crate::engine::{DispatchId, Input, OperationId, OverallStatus, Refusal};
use crate::github::payload::{CheckSuiteEvent, WorkflowRunEvent};
use crate::github::repo::Repo;
use crate::github::GitHubError;
use crate::report;
use crate::settings::{self, Settings};
use crate::store::sql::{OperationRow, RunRow, SqlError};
use crate::sync::LockExt;
use crate::telemetry::{waited, WaitStage};

impl Operations {
    /// `/supervise spend`: this repository's operations over the last day and
    /// week, against the daily budgets. The repository's cap shown is the one
    /// its operations in progress enforce (captured from the settings when
    /// each started); the settings on the default branch are read only for
    /// the next start, and a difference is said.
    pub async fn spend(&self, o: &Origin) -> Result<String, OpError> {
        // A file that does not read sets no cap here; `start` says why.
        let file = o
            .settings(&self.gh)
            .await?
            .as_ref()
            .ok()
            .cloned()
            .unwrap_or_default();
        let file_cap = file.daily_budget;
        // From the store, not this replica's memory: another replica may
        // hold an operation of the repository.
        let contexts: Vec<OpContext> = self
            .store
            .operations(true)
            .await?
            .into_iter()
            .filter(|row| row.repo == o.repo)
            .filter_map(|row| serde_json::from_str::<OpContext>(&row.context).ok())
            .collect();
        // In dollars, the same rule: the strictest in force, else the file's.
        let repo_usd = match contexts.is_empty() {
            true => file.daily_budget_usd,
            false => contexts.iter().filter_map(|c| c.daily_budget_usd).min(),
        };
        let mut enforced: Vec<Option<u64>> = contexts.iter().map(|ctx| ctx.daily_budget).collect();
        enforced.sort();
        enforced.dedup();
        // The strictest cap in force is the one that holds a dispatch first.
        let repo_cap = if enforced.is_empty() {
            file_cap
        } else {
            enforced.iter().flatten().min().copied()
        };
        let note = match enforced.as_slice() {
            [] => None,
            [only] if *only == file_cap => None,
            _ => Some(format!(
                "\n\nThe operations in progress enforce the cap their settings had when they started ({}); `.github/supervise.yml` on the default branch now says {}, which operations started from now on will use.",
                enforced.iter().map(|c| cap_text(*c)).collect::<Vec<_>>().join(", "),
                cap_text(file_cap)
            )),
        };
        let now = chrono::Utc::now();
        let records = self
            .store
            .spend_since(o.installation as i64, now - chrono::Duration::days(7))
            .await?;
        Ok(report::spend_comment(
            &o.repo,
            &records,
            report::DailyCaps {
                installation: self.limits.daily_budget,
                repo: repo_cap,
                prices: self.limits.costs,
                installation_usd: self.limits.daily_budget_usd,
                repo_usd,
            },
            now,
        ) + note.as_deref().unwrap_or(""))
    }

    /// `/supervise start [plan]`: reads the plan and settings from the default
    /// branch, creates the integration branch and starts the operation. Returns
    /// the reply for the person.
    pub async fn start(&self, o: &Origin, plan_arg: Option<&str>) -> Result<String, OpError> {
        if let Some(refusal) = self.started_elsewhere(o).await? {
            return Ok(refusal);
        }
        let repo = o.repo(&self.gh);
        let default_branch = repo.default_branch().await?;
        let file_settings = match self.file_settings(o, &default_branch, "start").await? {
            Ok(f) => f,
            Err(reply) => return Ok(reply),
        };
        let plan_path = plan_arg.unwrap_or("EXECUTION_PLAN.md").to_string();
        let Some((source, _)) = repo.file(&plan_path, Some(&default_branch)).await? else {
            return Ok(format!(
                "ERROR: Cannot find `{plan_path}` on `{default_branch}`.\nThe Sprint Supervisor requires an execution plan to operate. Commit one, or name it: `/supervise start path/to/EXECUTION_PLAN.md`. For work without a plan, say `/supervise solve` or `/supervise manage`."
            ));
        };
        let name = plan_path.rsplit('/').next().unwrap_or(&plan_path);
        let plan = match crate::plan::parse(&source, name) {
            Ok(p) => p,
            Err(problems) => {
                let e = crate::plan::PlanError {
                    path: plan_path.clone().into(),
                    problems,
                };
                return Ok(format!(
                    "I did not start: the plan cannot be run.\n\n```\n{e}```"
                ));
            }
        };
        let units = plan.work_units.len();
        let sprints: usize = plan.work_units.iter().map(|u| u.sprints.len()).sum();
        let mut engine = Settings::merge(file_settings.clone(), Default::default()).engine;
        engine.cost_model = self.cost_history(&o.repo).await;
        let expected =
            report::estimate_line(&crate::engine::estimate::estimate(&plan, &engine), &engine);
        let launched = self
            .launch(
                o,
                &repo,
                Start::plan(default_branch, file_settings, plan, plan_path),
            )
            .await?;
        Ok(match launched {
            Ok((op, workflow)) => format!(
                "Started operation `{op}`: {}, {}, agents through `.github/workflows/{workflow}` on branches from `{}`. {expected} Its status comment on this issue is kept up to date.",
                crate::text::count(units, "work unit"),
                crate::text::count(sprints, "sprint"),
                integration_branch(&op)
            ),
            Err(refusal) => refusal,
        })
    }

    /// `/supervise solve` and `/supervise manage`: work without a plan on the
    /// issue's title and body (and the command's own text), started like a
    /// plan. The topic directory is numbered by the issue: two issues started
    /// at once could both take "the next free number", an issue's number is
    /// theirs alone.
    pub async fn start_without_plan(
        &self,
        o: &Origin,
        kind: WorkflowKind,
        extra: &str,
    ) -> Result<String, OpError> {
        use crate::engine::workflow::{topic_dir, Manager, Phases, Scope, TEST_COMMANDS};
        if let Some(refusal) = self.started_elsewhere(o).await? {
            return Ok(refusal);
        }
        let repo = o.repo(&self.gh);
        let default_branch = repo.default_branch().await?;
        let word = kind.word();
        let file_settings = match self.file_settings(o, &default_branch, word).await? {
            Ok(f) => f,
            Err(reply) => return Ok(reply),
        };
        let IssueText {
            issue,
            text: from_issue,
            who,
            author_writes,
        } = issue_text(&repo, o.issue).await?;
        let set_aside = (!author_writes && !from_issue.is_empty()).then(|| {
            format!(
                "This issue was opened by {who}, who cannot write to this repository, so its text is not used as instructions for agents. "
            )
        });
        let description = [
            (author_writes && !from_issue.is_empty()).then(|| {
                format!("{from_issue}\n\n(Written by {who}, who can write to this repository.)")
            }),
            (!extra.trim().is_empty()).then(|| extra.trim().to_string()),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("\n\n");
        if description.is_empty() {
            return Ok(format!(
                "{}This issue says nothing to work on{}. Say what to do after the command: `/supervise {word} add rate limiting to the API`{}.",
                set_aside.as_deref().unwrap_or(""),
                if set_aside.is_some() { " that I may follow" } else { "" },
                if set_aside.is_some() { "" } else { ", or give the issue a title and a description" },
            ));
        }
        let mut wf = Settings::merge(file_settings.clone(), Default::default()).without_plan;
        let number = o.issue.clamp(0, u32::MAX as i64) as u32;
        let workflow = match kind {
            WorkflowKind::Solve(scope) => {
                if wf.test_command.is_none() {
                    for s in TEST_COMMANDS {
                        if let Some((text, _)) = repo.file(s.file, Some(&default_branch)).await? {
                            if (s.holds)(&text) {
                                wf.test_command = Some(s.command.to_string());
                                break;
                            }
                        }
                    }
                }
                Workflow::Phases(Phases::new(&description, scope, &wf, number))
            }
            WorkflowKind::Manage => {
                let topic = topic_dir(number, &issue.title);
                Workflow::Manager(Manager::new(&description, &topic, wf.max_tasks))
            }
        };
        let announcement = workflow.announcement();
        let launched = self
            .launch(
                o,
                &repo,
                Start::workflow(default_branch, file_settings, workflow.clone()),
            )
            .await?;
        Ok(match launched {
            Ok((op, agent_workflow)) => {
                let scopes = workflow
                    .scope()
                    .map(|_| {
                        format!(
                            "\nAnother scope: `/supervise stop`, then `/supervise solve <scope>` ({}).",
                            Scope::names()
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "{}Started operation `{op}` without a plan.\n\n{announcement}{scopes}\n\nAgents run through `.github/workflows/{agent_workflow}` on branches from `{}`. Its status comment on this issue is kept up to date.",
                    set_aside.as_deref().map(|s| format!("{s}Only the words after the command are.\n\n")).unwrap_or_default(),
                    integration_branch(&op)
                )
            }
            Err(refusal) => refusal,
        })
    }

    /// `/supervise breakdown [DOC]` with a planning agent: the document on
    /// the default branch (or the issue's text, if its author may write to
    /// the repository) broken down by the plan phase of the phase workflow,
    /// in Actions like every agent, each attempt held to the breakdown's
    /// checks and told what failed. The accepted plan is proposed in a pull
    /// request of its own when the operation completes.
    pub async fn start_breakdown(&self, o: &Origin, doc: Option<&str>) -> Result<String, OpError> {
        use crate::engine::workflow::Phases;
        use crate::plan::tools::breakdown as bd;
        if let Some(refusal) = self.started_elsewhere(o).await? {
            return Ok(refusal);
        }
        let repo = o.repo(&self.gh);
        let default_branch = repo.default_branch().await?;
        let file_settings = match self.file_settings(o, &default_branch, "breakdown").await? {
            Ok(f) => f,
            Err(reply) => return Ok(reply),
        };
        let (source, text, target) = match doc {
            Some(path) => match repo.file(path, Some(&default_branch)).await? {
                Some((text, _)) => (
                    format!("`{path}` on `{default_branch}`"),
                    text,
                    bd::plan_beside(path),
                ),
                None => return Ok(bd::no_document(path, &default_branch)),
            },
            None => {
                let it = issue_text(&repo, o.issue).await?;
                if !it.author_writes {
                    return Ok(format!(
                        "This issue was opened by {}, who cannot write to this repository, so a planning agent is not given its text. Put the requirements in a document on `{default_branch}` and say `/supervise breakdown <path>`, or say `/supervise breakdown offline` for the heuristics' plan (no agent reads it).",
                        it.who
                    ));
                }
                (
                    format!("issue #{}", o.issue),
                    it.text,
                    "EXECUTION_PLAN.md".to_string(),
                )
            }
        };
        if bd::requirements_of(&text).is_empty() {
            return Ok(bd::no_requirements(&source));
        }
        let wf = Settings::merge(file_settings.clone(), Default::default()).without_plan;
        let number = o.issue.clamp(0, u32::MAX as i64) as u32;
        let mut phases = Phases::breakdown(&text, &wf, number);
        phases.plan_target = Some(target.clone());
        let launched = self
            .launch(
                o,
                &repo,
                Start::workflow(default_branch, file_settings, Workflow::Phases(phases)),
            )
            .await?;
        Ok(match launched {
            Ok((op, agent_workflow)) => format!(
                "Started operation `{op}`: a planning agent breaks down {source} into a plan, through `.github/workflows/{agent_workflow}`. Each attempt is held to the breakdown's checks — the reader reads it, every requirement is in some sprint, a machine check wherever one can be written, no sprint over the turn budget — and what fails is told to the next attempt, on a stronger model. The accepted plan is proposed as `{target}` in a pull request of its own. (`/supervise breakdown offline` gives the heuristics' plan at once.)"
            ),
            Err(refusal) => refusal,
        })
    }

    /// The refusal when another operation (not one this comment started: a
    /// command processed again finds its own and answers as the first time)
    /// is under way on the issue.
    async fn started_elsewhere(&self, o: &Origin) -> Result<Option<String>, OpError> {
        let Some(row) = self
            .store
            .operation_on(&o.repo, o.issue)
            .await?
            .filter(|r| !crate::contract::started_by(&r.id, o.comment as u64))
        else {
            return Ok(None);
        };
        let l = self.open(&row).await?;
        let live = l.lock().await;
        Ok(live.driver.state.as_ref().and_then(|st| {
            (st.status != OverallStatus::Completed).then(|| {
                format!(
                    "{}\n\nOperation `{}` is {} on this issue.",
                    Refusal::AlreadyStarted(st.id.0.clone()),
                    st.id,
                    st.status
                )
            })
        }))
    }

    /// The repository's settings on its default branch (defaults without a
    /// file), as read for this delivery, or the reply that says why `word`
    /// did not start.
    async fn file_settings(
        &self,
        o: &Origin,
        default_branch: &str,
        word: &str,
    ) -> Result<Result<settings::FileSettings, String>, OpError> {
        Ok(o.settings(&self.gh)
            .await?
            .clone()
            .map_err(|e| {
                format!(
                    "I did not start: `.github/supervise.yml` is not valid.\n\n```\n{e}\n```\nFix it on `{default_branch}` and say `/supervise {word}` again."
                )
            }))
    }

    /// Makes the integration branch (with a workflow's starting files), records
    /// the operation and starts it: its id and the agent workflow's file, or
    /// the engine's refusal.
    /// What attempts have cost in `repo`: learned from its latest
    /// operations in the store; the defaults when it has none or they do not
    /// read (an estimate is no reason to refuse a start).
    async fn cost_history(&self, repo: &str) -> CostModel {
        let mut past = Vec::new();
        let ids = match self.store.latest_operations(repo, HISTORY).await {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!("no cost history: {e}");
                return CostModel::default();
            }
        };
        for id in ids {
            match self.store.load_operation(&id).await {
                Ok(loaded) => past.extend(crate::engine::OperationState::replay(&loaded.events)),
                Err(e) => tracing::warn!(op = %id, "left out of the cost history: {e}"),
            }
        }
        CostModel::learn(&past)
    }

    async fn launch(
        &self,
        o: &Origin,
        repo: &Repo<'_>,
        start: Start,
    ) -> Result<Result<(String, String), String>, OpError> {
        let Start {
            default_branch,
            file_settings,
            plan,
            workflow,
            plan_path,
        } = start;
        let mut settings = Settings::merge(file_settings.clone(), Default::default());
        settings.engine.cost_model = self.cost_history(&o.repo).await;
        let op = crate::contract::operation_id(&plan.title, o.comment as u64);
        let head = repo
            .branch_sha(&default_branch)
            .await?
            .ok_or_else(|| GitHubError::NeedsPerson(format!("no branch {default_branch}")))?;
        let already_done = match &workflow {
            None => done_before_start(repo, &plan, &head).await,
            Some(_) => Vec::new(),
        };
        let integration = integration_branch(&op);
        // Made now, the branch's head is known: the first sprints' runs begin
        // at it, and their verification need not ask GitHub whether they merge.
        let mut integration_head = repo
            .create_branch(&integration, &head)
            .await?
            .then(|| head.clone());
        if let Some(w) = &workflow {
            for (path, text) in w.seed_files() {
                let committed = repo
                    .put_file(
                        &integration,
                        &path,
                        &text,
                        "supervise: the workflow's starting files",
                    )
                    .await?;
                integration_head = committed.or(integration_head);
            }
        }
        let ctx = OpContext {
            op: op.clone(),
            repo: o.repo.to_string(),
            issue: o.issue,
            installation: o.installation,
            default_branch,
            plan_path,
            workflow: file_settings
                .workflow
                .clone()
                .unwrap_or_else(|| DEFAULT_WORKFLOW.into()),
            merge: file_settings.merge,
            // A person, by a name GitHub could have given (a bot is not told).
            mention: file_settings
                .mention
                .unwrap_or(false)
                .then(|| o.author.clone())
                .filter(|login| crate::text::is_user_login(login)),
            required_approvals: file_settings.required_approvals,
            daily_budget: file_settings.daily_budget,
            daily_budget_usd: file_settings.daily_budget_usd,
            started_at: o
                .created_at
                .clone()
                .unwrap_or_else(|| chrono::Utc::now().to_rfc3339()),
            start_head: Some(head.clone()),
        };
        let row = OperationRow {
            id: op.clone(),
            repo: o.repo.to_string(),
            issue: o.issue,
            installation: o.installation as i64,
            active: true,
            status_comment: None,
            context: serde_json::to_string(&ctx).map_err(SqlError::from)?,
        };
        self.store.create_operation(&row).await?;
        let l = self.open(&row).await?;
        let mut live = l.lock().await;
        self.acquire(&mut live).await?;
        if live.driver.state.is_none() {
            if integration_head.is_some() {
                live.place.merges.head = integration_head;
            }
            let input = Input::Start {
                operation: OperationId(op.clone()),
                plan: Box::new(plan),
                config: settings.engine,
                seed: o.comment as u64,
                workflow: workflow.map(Box::new),
                already_done,
            };
            if let Some(r) = self.submit(&mut live, input).await?.refusal() {
                return Ok(Err(r.to_string()));
            }
        }
        self.flush(&mut live, true).await?;
        Ok(Ok((op, live.place.ctx.workflow.clone())))
    }

    /// The operation on this issue, if any.
    pub async fn on_issue(&self, repo: &str, issue: i64) -> Result<Option<String>, OpError> {
        Ok(self.store.operation_on(repo, issue).await?.map(|r| r.id))
    }

    /// A command on the issue's operation (`resume`, `stop`, …), replied to as
    /// its table entry says.
    pub async fn command(
        &self,
        repo: &str,
        issue: i64,
        input: Input,
        on: OnOperation,
    ) -> Result<String, OpError> {
        let Some((op, decided)) = self.decide_on(repo, issue, input).await? else {
            return Ok(match on.without {
                Some(text) => text.to_string(),
                None => Refusal::NotStarted
                    .to_string()
                    .replace("`start`", "`/supervise start`"),
            });
        };
        Ok(match decided {
            Decided::Acted(_) => format!("{} Operation `{op}`.", on.done),
            Decided::Refused(r) => r.to_string(),
        })
    }

    /// Hands `input` to the operation of `repo`'s issue `issue` and carries
    /// out what it decides: the operation's id and what became of the
    /// input, `None` when the issue has no operation.
    pub async fn decide_on(
        &self,
        repo: &str,
        issue: i64,
        input: Input,
    ) -> Result<Option<(String, Decided)>, OpError> {
        let Some(row) = self.store.operation_on(repo, issue).await? else {
            return Ok(None);
        };
        let l = self.open(&row).await?;
        let mut live = l.lock().await;
        self.acquire(&mut live).await?;
        let decided = self.submit(&mut live, input).await?;
        if let Decided::Acted(_) = decided {
            if row.active {
                self.flush(&mut live, true).await?;
            } else {
                self.store.set_active(&row.id, true).await?;
            }
        }
        Ok(Some((row.id, decided)))
    }

    /// The status table of the issue's operation.
    pub async fn status(&self, repo: &str, issue: i64) -> Result<Option<String>, OpError> {
        let Some(row) = self.store.operation_on(repo, issue).await? else {
            return Ok(None);
        };
        let runs = self.run_links(&row.id).await?;
        let link = |d: &DispatchId| runs.get(&d.0).cloned();
        let l = self.open(&row).await?;
        let live = l.lock().await;
        // The table without the status comment's marker: a reply must never be
        // taken for the sticky comment.
        Ok(live
            .driver
            .state
            .as_ref()
            .map(|st| report::posts::status_table(st, chrono::Utc::now(), &link)))
    }

    // ----- webhooks ----------------------------------------------------------

    /// A `workflow_run` webhook: a run of ours started or finished.
    pub async fn workflow_run(&self, ev: WorkflowRunEvent) -> Result<(), OpError> {
        let run = ev.run;
        let row = match self.store.run_by_id(run.id).await? {
            Some(r) => r,
            None => {
                // Not yet recorded (the dispatch's answer was lost): the name says.
                let Some(d) = run.title.split_whitespace().find(|w| w.contains('/')) else {
                    return Ok(());
                };
                match self.store.run(d).await? {
                    Some(r) => r,
                    None => return Ok(()),
                }
            }
        };
        let l = match self.get(&row.op) {
            Some(l) => l,
            None => match self.store.operation(&row.op).await? {
                Some(op) => self.open(&op).await?,
                None => return Ok(()),
            },
        };
        let asked = std::time::Instant::now();
        let mut live = l.lock().await;
        // Of a delivery's waits, this one is known only here.
        waited(WaitStage::Operation, asked.elapsed());
        let span = tracing::info_span!("operation", op = %row.op);
        let traced_op = row.op.to_string();
        let work = async {
            self.acquire(&mut live).await?;
            let dispatch = DispatchId(row.dispatch.clone());
            let is_final = super::head::is_final_dispatch(&row.dispatch);
            self.store
                .put_run(&RunRow {
                    run_id: Some(run.id),
                    html_url: Some(run.html_url.clone()),
                    ..row.clone()
                })
                .await?;
            match ev.action.as_str() {
                "completed" if !is_final => {
                    self.finish(
                        &mut live,
                        &dispatch,
                        run.conclusion.as_deref(),
                        &run.html_url,
                    )
                    .await?
                }
                "in_progress" if !is_final => live
                    .driver
                    .queue
                    .push_back(Input::AgentStarted { dispatch }),
                _ => {}
            }
            // A final verification's run is no engine dispatch: the report
            // waiting on it is asked again now.
            self.drive_with(&mut live, is_final && ev.action == "completed")
                .await?;
            self.flush(&mut live, false).await
        };
        crate::otlp::in_operation(&traced_op, tracing::Instrument::instrument(work, span)).await
    }

    /// A check suite on some commit completed (the repository's CI, most
    /// often): a verification waiting for CI on that commit, or a build gate
    /// waiting for it on the integration branch's head, goes on now, not at
    /// the next reconciliation.
    pub async fn check_suite(&self, ev: &CheckSuiteEvent) -> Result<(), OpError> {
        let head = ev.head_sha.as_str();
        for l in self.lives_of(&ev.repo) {
            let mut live = l.lock().await;
            let waiting: Vec<(DispatchId, AwaitingCi)> = live
                .place
                .runs
                .awaiting_ci
                .iter()
                .filter(|(_, w)| w.head == head)
                .map(|(d, w)| (d.clone(), w.clone()))
                .collect();
            // A build gate waits for CI on the integration branch's head.
            let on_integration = live.place.merges.head.as_deref() == Some(head);
            if waiting.is_empty() && !on_integration {
                continue;
            }
            let span = tracing::info_span!("operation", op = %live.place.ctx.op);
            let traced_op = live.place.ctx.op.to_string();
            let work = async {
                if !self.acquired(&mut live).await? {
                    return Ok(());
                }
                for (d, w) in waiting {
                    self.finish(&mut live, &d, w.conclusion.as_deref(), &w.url)
                        .await?;
                }
                self.drive_with(&mut live, on_integration).await?;
                self.flush(&mut live, false).await
            };
            crate::otlp::in_operation(&traced_op, tracing::Instrument::instrument(work, span))
                .await?;
        }
        Ok(())
    }
}

/// A daily cap as the spend reply writes it.
fn cap_text(cap: Option<u64>) -> String {
    cap.map_or_else(|| "no cap".to_string(), |c| format!("{c}× a day"))
}

impl Operations {
    /// The repository's loaded operations, to be locked one at a time.
    fn lives_of(&self, repo: &str) -> Vec<std::sync::Arc<tokio::sync::Mutex<Live>>> {
        self.live
            .locked()
            .values()
            .filter(|l| l.repo == repo)
            .map(|l| l.live.clone())
            .collect()
    }

    /// Whether this replica holds the operation to act on it now; `false`
    /// when another does (it reconciles).
    async fn acquired(&self, live: &mut Live) -> Result<bool, OpError> {
        match self.acquire(live).await {
            Err(OpError::Busy(_)) => Ok(false),
            r => r.map(|_| true),
        }
    }

    /// A sprint's pull request was reviewed: the repository's operations
    /// ask again at once whether their sprints waiting for a review may
    /// merge or must go back to work (a merge waits on GitHub's word, which
    /// reconciliation would otherwise ask for only every
    /// `SUPERVISE_RECONCILE_SECS`).
    pub async fn reviewed(&self, repo: &str) -> Result<(), OpError> {
        for l in self.lives_of(repo) {
            let mut live = l.lock().await;
            let span = tracing::info_span!("operation", op = %live.place.ctx.op);
            let traced_op = live.place.ctx.op.to_string();
            let work = async {
                if !self.acquired(&mut live).await? {
                    return Ok(());
                }
                self.drive_with(&mut live, true).await?;
                self.flush(&mut live, false).await
            };
            crate::otlp::in_operation(&traced_op, tracing::Instrument::instrument(work, span))
                .await?;
        }
        Ok(())
    }
}

/// §3 steps 4–5 on GitHub: the sprints done at the starting commit, judged
/// from the files the progress markers and criteria name, read through the
/// contents API a few at a time as the judgement asks for them. No command
/// runs here, so a sprint with command criteria counts only on its progress
/// file's word. A file that does not read counts as missing: the sprint is
/// dispatched, which costs an attempt, never a wrong ✓.
async fn done_before_start(
    repo: &Repo<'_>,
    plan: &crate::plan::Plan,
    head: &str,
) -> Vec<crate::engine::AlreadyDone> {
    let mut commit = ReadThroughApi::default();
    loop {
        let unread = match done_before::already_done(plan, &mut commit) {
            Ok(found) => return found,
            Err(unread) => unread,
        };
        let mut read_any = false;
        for path in unread {
            if commit.files.contains_key(&path) {
                continue;
            }
            let found = match repo.file(&path, Some(head)).await {
                Ok(Some((text, _))) => Found::File(text.into_bytes()),
                Ok(None) => Found::Missing,
                Err(e) => {
                    tracing::warn!(%path, error = %e, "reading a file at the starting commit; taken as missing");
                    Found::Missing
                }
            };
            commit.files.insert(path, found);
            read_any = true;
        }
        if !read_any {
            return Vec::new();
        }
    }
}

/// The starting commit as the contents API shows it: the files read so far.
#[derive(Default)]
struct ReadThroughApi {
    files: std::collections::HashMap<String, Found>,
}

impl StartingCommit for ReadThroughApi {
    fn read(&self, path: &str) -> Found {
        match self.files.get(path) {
            Some(Found::File(b)) => Found::File(b.clone()),
            Some(_) => Found::Missing,
            None => Found::NotRead,
        }
    }

    fn run(&mut self, _: &crate::plan::WorkUnit, _: &crate::plan::Criterion) -> Option<bool> {
        None
    }
}

/// An issue's title and text, and whether its author may write to the
/// repository: only then does the text instruct agents (anyone can open an
/// issue, and an agent follows what its prompt says).
struct IssueText {
    issue: crate::github::answers::Issue,
    text: String,
    who: String,
    author_writes: bool,
}

async fn issue_text(repo: &Repo<'_>, number: i64) -> Result<IssueText, OpError> {
    let issue = repo.issue(number).await?;
    let author = issue.user.as_ref().map(|u| u.login.clone());
    let author_writes = match &author {
        Some(login) => matches!(
            repo.role(login).await?,
            Ok(role) if crate::commands::auth::Permission::parse(&role)
                >= crate::commands::auth::Permission::Write
        ),
        None => false,
    };
    let text = [
        issue.title.trim(),
        issue.body.as_deref().unwrap_or("").trim(),
    ]
    .into_iter()
    .filter(|t| !t.is_empty())
    .collect::<Vec<_>>()
    .join("\n\n");
    Ok(IssueText {
        issue,
        text,
        who: author.unwrap_or_else(|| "a deleted account".into()),
        author_writes,
    })
}

/// What an operation starts from: the branch it starts at, the repository's
/// settings read there, and the plan — a written one, or a workflow's.
struct Start {
    default_branch: String,
    file_settings: settings::FileSettings,
    plan: crate::plan::Plan,
    /// Work without a written plan: the workflow whose first units `plan` is.
    workflow: Option<Workflow>,
    /// Where a written plan was read ("" for a workflow's).
    plan_path: String,
}

impl Start {
    fn plan(
        default_branch: String,
        file_settings: settings::FileSettings,
        plan: crate::plan::Plan,
        plan_path: String,
    ) -> Start {
        Start {
            default_branch,
            file_settings,
            plan,
            workflow: None,
            plan_path,
        }
    }

    fn workflow(
        default_branch: String,
        file_settings: settings::FileSettings,
        workflow: Workflow,
    ) -> Start {
        Start {
            default_branch,
            file_settings,
            plan: workflow.plan(),
            workflow: Some(workflow),
            plan_path: String::new(),
        }
    }
}
