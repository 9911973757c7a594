//! Runs in flight against GitHub's ground truth: reconciliation, and turning a
//! finished run into the engine's `AgentFinished` with its evidence (§5).

use super::{Live, OpError, Operations};
use crate::contract::{integration_branch, results_path, sprint_branch, RunResult};
use crate::drive::Decided;
use crate::engine::CiFailure;
use crate::engine::{AgentReport, DispatchId, Effect, Evidence, Input};
use crate::github::repo::{Check, PullRequest, Repo};
use crate::report;
use crate::store::sql::RunRow;
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// What an operation's place remembers of its runs in flight between
/// deliveries: what GitHub is still to be asked about them, and what was
/// read already so that a later look reads less.
#[derive(Debug, Default)]
pub(super) struct RunsInFlight {
    /// When GitHub was last asked about every run (None: at the next tick).
    last_reconcile: Option<Instant>,
    /// Heads waiting for the repository's CI to report at all (a gate's
    /// integration head, a finished run's sprint head): since when.
    pub ci_first_seen: HashMap<String, Instant>,
    /// A head of this operation's waited out the grace with no CI check at
    /// all: the repository has no CI, and no later head waits for it.
    pub no_ci: bool,
    /// Finished runs whose verification waits for the repository's CI: what
    /// was read of them, so a later look reads only the checks.
    pub awaiting_ci: HashMap<DispatchId, AwaitingCi>,
    /// Runs asked to cancel: when a force-cancel is due, and whether it was sent.
    pub cancels: HashMap<i64, (Instant, bool)>,
    /// The pull request of each sprint branch, once opened or read: a
    /// later attempt's verification reads it rather than looking for it.
    pub pulls: HashMap<String, i64>,
}

impl RunsInFlight {
    /// Whether `head`'s CI has said what it will say: it has checks (all
    /// finished), or none came within `grace` of first looking — once per
    /// operation: a repository seen without CI is not waited for again,
    /// until a head shows checks.
    pub fn ci_reported(
        &mut self,
        head: &str,
        has_checks: bool,
        grace: Duration,
        now: Instant,
    ) -> bool {
        let since = *self.ci_first_seen.entry(head.to_string()).or_insert(now);
        if !has_checks && !self.no_ci && now.duration_since(since) < grace {
            return false;
        }
        self.ci_first_seen.remove(head);
        self.no_ci = !has_checks;
        true
    }

    /// The status comment's line while a head waits for CI to report at
    /// all, with the grace it waits at most.
    pub fn waiting_for_ci(&self, grace: std::time::Duration) -> Option<String> {
        (!self.ci_first_seen.is_empty() && !self.no_ci).then(|| {
            format!(
                "⏳ Waiting up to {} s for CI checks to report on the newest work (a repository without CI waits this once per operation).",
                grace.as_secs()
            )
        })
    }

    /// Whether nothing but the runs themselves waits on GitHub: no cancel to
    /// follow up, no finished run waiting for CI.
    pub fn is_quiet(&self) -> bool {
        self.cancels.is_empty() && self.awaiting_ci.is_empty()
    }

    /// Whether GitHub is to be asked about the runs now, `every` being the
    /// time between looks; a yes counts as the look.
    pub fn reconcile_due(&mut self, every: Duration) -> bool {
        let due = self.last_reconcile.is_none_or(|t| t.elapsed() >= every);
        if due {
            self.last_reconcile = Some(Instant::now());
        }
        due
    }

    /// The next tick asks GitHub about every run, whenever it last did.
    pub fn reconcile_now(&mut self) {
        self.last_reconcile = None;
    }

    /// A run was asked to cancel; unless it ends by `force_at`, it is
    /// force-cancelled.
    pub fn cancelled(&mut self, run: i64, force_at: Instant) {
        self.cancels.insert(run, (force_at, false));
    }
}

/// A finished run waiting for CI on its sprint's head.
#[derive(Debug, Clone)]
pub(super) struct AwaitingCi {
    pub conclusion: Option<String>,
    pub url: String,
    pub pr: Option<PullRequest>,
    pub head: String,
}

/// The exit code a workflow run's conclusion stands for (a cancelled run
/// has none: its agent was stopped, not failed).
fn conclusion_exit(c: Option<&str>) -> Option<i32> {
    match c {
        Some("success") => Some(0),
        Some("cancelled") | None => None,
        Some(_) => Some(1),
    }
}

impl Operations {
    /// Compares every dispatch in flight with its run on GitHub: a finished run
    /// whose webhook was missed is finished now.
    ///
    /// Webhooks are the normal path; this is the safety net, and it must cost
    /// next to nothing: one conditional look at the workflow's newest runs
    /// answers for every run in flight (GitHub answers 304, free, while none
    /// changed), and a run is read on its own only when it is not among them.
    pub(super) async fn reconcile(&self, live: &mut Live) -> Result<(), OpError> {
        let Some(st) = &live.driver.state else {
            return Ok(());
        };
        let active: Vec<DispatchId> = st
            .units
            .iter()
            .flat_map(|u| u.sprints.iter())
            .filter_map(|s| s.active.as_ref().map(|a| a.id.clone()))
            .collect();
        let dispatching: HashSet<String> = live
            .driver
            .pending
            .iter()
            .filter_map(|p| match &p.effect {
                Effect::Dispatch(o) => Some(o.dispatch.0.clone()),
                _ => None,
            })
            .collect();
        let ctx = live.place.ctx.clone();
        let repo = self.repo(&ctx);
        // Runs whose state GitHub is asked for: a dispatch still in the
        // outbox has none yet, and a finished one waiting for CI is done.
        let watched: Vec<DispatchId> = active
            .into_iter()
            .filter(|d| !dispatching.contains(&d.0))
            .collect();
        let asks_runs = !live.place.runs.cancels.is_empty()
            || watched
                .iter()
                .any(|d| !live.place.runs.awaiting_ci.contains_key(d));
        // The runs GitHub is asked about, by id where their dispatch's
        // answer gave it (most); the rest are found by their names.
        let mut rows = HashMap::new();
        for d in &watched {
            if !live.place.runs.awaiting_ci.contains_key(d) {
                rows.insert(d.clone(), self.store.run(&d.0).await?);
            }
        }
        let wanted: Vec<i64> = rows
            .values()
            .filter_map(|r| r.as_ref().and_then(|r| r.run_id))
            .chain(live.place.runs.cancels.keys().copied())
            .collect();
        let recent = match asks_runs {
            true => repo.recent_runs(&ctx.workflow, &wanted).await?,
            false => Vec::new(),
        };
        let by_id = |id: i64| recent.iter().find(|r| r.id == id).cloned();
        for (id, (at, forced)) in live.place.runs.cancels.clone() {
            let run = match by_id(id) {
                Some(r) => Some(r),
                None => repo.run(id).await?,
            };
            match run {
                Some(r) if r.status != "completed" => {
                    if !forced && Instant::now() >= at {
                        tracing::warn!(run = id, "the run ignored its cancel; force-cancelling");
                        repo.cancel(id, true).await?;
                        live.place.runs.cancels.insert(id, (at, true));
                    }
                }
                _ => {
                    live.place.runs.cancels.remove(&id);
                }
            }
        }
        for d in watched {
            // Finished, and its verification waits for CI: only CI is read.
            if let Some(w) = live.place.runs.awaiting_ci.get(&d).cloned() {
                self.finish(live, &d, w.conclusion.as_deref(), &w.url)
                    .await?;
                continue;
            }
            let row = rows.remove(&d).flatten();
            let run = match row.as_ref().and_then(|r| r.run_id) {
                Some(id) => match by_id(id) {
                    Some(r) => Some(r),
                    None => repo.run(id).await?,
                },
                None => match recent.iter().find(|r| r.carries(&d.0)) {
                    Some(r) => Some(r.clone()),
                    None => {
                        self.find_run(&live.place.ctx, live.driver.state.as_deref(), &d)
                            .await?
                    }
                },
            };
            match run {
                Some(run) if run.status == "completed" => {
                    let url = run.html_url.clone();
                    // Found by its name: remember it (known ones are not rewritten).
                    if row.as_ref().is_none_or(|r| r.run_id.is_none()) {
                        self.record_run(&live.place.ctx, &d, run.id, &url, None)
                            .await?;
                    }
                    self.finish(live, &d, run.conclusion.as_deref(), &url)
                        .await?;
                }
                Some(_) => {}
                None => {
                    self.store.spend_ended(&d.0).await?;
                    live.driver.queue.push_back(Input::DispatchFailed {
                        dispatch: d.clone(),
                        error: "the workflow run for this dispatch cannot be found on GitHub"
                            .into(),
                    })
                }
            }
        }
        Ok(())
    }

    /// How long until the operation is next reconciled. Something waiting on
    /// GitHub besides runs (CI, a review, a cancel) is looked at every
    /// `reconcile`; runs alone are looked at less often the longer the
    /// youngest has been in flight (a quarter of its age, up to sixteen
    /// times the base), since their webhooks tell the news; near the rate
    /// limit, at the longest.
    pub(super) fn reconcile_every(&self, live: &Live) -> Duration {
        let base = self.timings.reconcile;
        let longest = base * 16;
        if self.gh.is_short(live.place.ctx.installation) {
            return longest;
        }
        let Some(st) = &live.driver.state else {
            return base;
        };
        if !live.place.runs.is_quiet() || !live.driver.pending.is_empty() {
            return base;
        }
        let now = chrono::Utc::now();
        let youngest = st
            .units
            .iter()
            .flat_map(|u| u.sprints.iter())
            .filter_map(|s| s.active.as_ref())
            .map(|a| (now - a.dispatched_at).to_std().unwrap_or_default())
            .min();
        match youngest {
            Some(age) => (age / 4).clamp(base, longest),
            None => base,
        }
    }

    /// Gathers the evidence of a finished run and hands it to the engine; then
    /// publishes the attempt's check run on the sprint's head.
    pub(super) async fn finish(
        &self,
        live: &mut Live,
        d: &DispatchId,
        conclusion: Option<&str>,
        url: &str,
    ) -> Result<(), OpError> {
        // The run is over: its agent no longer counts against the
        // installation's agents in flight (whatever verification finds).
        self.store.spend_ended(&d.0).await?;
        let Some(st) = &live.driver.state else {
            return Ok(());
        };
        let Some((u, s)) = st.find_dispatch(d) else {
            return Ok(()); // already finished: a repeated webhook
        };
        let ctx = live.place.ctx.clone();
        let repo = self.repo(&ctx);
        let unit = st.plan.work_units[u].clone();
        let sprint = unit.sprints[s].clone();
        let active = st.units[u].sprints[s].active.clone();
        let branch = sprint_branch(&ctx.op, &st.units[u].slug, sprint.id.as_str());
        let row = self.store.run(&d.0).await?;
        // The sprint's pull request gives its head and, once GitHub has
        // computed it, whether it merges: one read for both. The first
        // verification of a sprint opens it from what the run pushed (the
        // answer carries the head); an earlier attempt's is read.
        let known = row
            .as_ref()
            .and_then(|r| r.pull)
            .or_else(|| live.place.runs.pulls.get(&branch).copied());
        let waited = live.place.runs.awaiting_ci.remove(d);
        let open = || async {
            let title = format!("{} — Sprint {}: {}", unit.name, sprint.id, sprint.name);
            let body = report::posts::sprint_pr_body(&ctx.op, &unit, &sprint, url);
            repo.open_pull(&branch, &integration_branch(&ctx.op), &title, &body)
                .await
        };
        let pr = match (waited.as_ref(), known) {
            (Some(w), _) => w.pr.clone(),
            (None, Some(n)) => match repo.pull(n).await? {
                // The sprint was merged and is being done again (a build
                // gate charged it, or its merge was lost): its new work
                // needs a pull request of its own to land.
                p if p.merged => open().await?,
                p => Some(p),
            },
            (None, None) => open().await?,
        };
        if let Some(p) = &pr {
            live.place.runs.pulls.insert(branch.clone(), p.number);
            if known != Some(p.number) {
                self.store
                    .put_run(&RunRow {
                        dispatch: d.0.clone(),
                        op: ctx.op.clone(),
                        pull: Some(p.number),
                        ..Default::default()
                    })
                    .await?;
            }
        }
        let head = match (
            waited.map(|w| w.head),
            pr.as_ref().and_then(|p| p.head_sha.clone()),
        ) {
            (Some(h), _) | (None, Some(h)) => Some(h),
            (None, None) => repo.branch_sha(&branch).await?,
        };
        let Some(head) = head else {
            // The agent's job ran (or was stopped) but the trusted jobs
            // published nothing: an attempt that left no work, whose end
            // (a cap's cancel, say) the engine knows the reason for.
            let report = AgentReport {
                exit_code: conclusion_exit(conclusion).map(|c| c.max(1)),
                output_tail: format!(
                    "The workflow run ended `{}` and published nothing on {branch} (its trusted jobs did not finish). See {url}",
                    conclusion.unwrap_or("unknown")
                ),
                ..Default::default()
            };
            self.decide(
                live,
                Input::AgentFinished {
                    dispatch: d.clone(),
                    report,
                },
            )
            .await?;
            return Ok(());
        };
        // The repository's own CI on the head must have reported first; the
        // next reconciliation looks again.
        let Some(ci) = self.ci_on(&mut live.place.runs, &repo, &head).await? else {
            live.place.runs.awaiting_ci.insert(
                d.clone(),
                AwaitingCi {
                    conclusion: conclusion.map(str::to_string),
                    url: url.to_string(),
                    pr,
                    head,
                },
            );
            return Ok(());
        };
        let HeadChecks { ci, own } = ci;
        let ci_passed = (!ci.is_empty()).then(|| ci.iter().all(|c| c.green()));
        let ci_failures = ci_failures(&repo, &ci).await;
        let file = repo
            .file(&results_path(&d.0), Some(&head))
            .await?
            .map(|(t, _)| t);
        let (recorded, forged) = match vouched_record(&d.0, file, &own, &ci) {
            Ok(r) => (r, None),
            Err(why) => (None, Some(why)),
        };
        let base = row.as_ref().and_then(|r| r.base_sha.clone());
        // The runner lists the agent's commits when it knows where the run
        // began; an older agent workflow's results do not, and GitHub is asked.
        let commits = match (recorded.as_ref().and_then(|r| r.commits.clone()), &base) {
            (Some(listed), _) => listed,
            (None, Some(b)) => repo
                .compare(b, &head)
                .await?
                .into_iter()
                .filter(|(_, msg)| !crate::contract::is_supervisor_commit(msg.as_bytes()))
                .map(|(sha, _)| crate::contract::short_id(&sha))
                .collect(),
            (None, None) => Vec::new(),
        };
        // The list endpoint does not say whether a pull request merges; the
        // pull request itself does, once GitHub has computed it.
        let began_at = recorded.as_ref().and_then(|r| r.began_at.as_ref());
        let mergeable = match &pr {
            // The run began at the integration branch's head, which has not
            // moved since as far as this process knows (it makes the
            // operation's merges), and the head it left still contains that
            // start (the runner's git says so): the merge is clean, and
            // GitHub's background answer is not waited for. A push to the
            // integration branch by someone else meanwhile is caught by the
            // merge itself, which then asks a person.
            Some(p)
                if p.mergeable.is_none()
                    && began_at.is_some()
                    && began_at == live.place.merges.head.as_ref() =>
            {
                Some(true)
            }
            // It began at an earlier head, and no path it changed was
            // merged since (by this process's own merges): clean as well.
            Some(p)
                if p.mergeable.is_none()
                    && live.place.merges.clean_since(
                        began_at,
                        recorded.as_ref().and_then(|r| r.changed.as_deref()),
                    ) =>
            {
                Some(true)
            }
            Some(p) => repo.mergeable(p.number, Some(p)).await?,
            None => None,
        };
        if let Some(paths) = recorded.as_ref().and_then(|r| r.changed.clone()) {
            live.place.merges.changed.insert(d.clone(), paths);
        }
        let pr = pr.map(|p| p.number);
        self.store
            .put_run(&RunRow {
                dispatch: d.0.clone(),
                op: ctx.op.clone(),
                verified_sha: Some(head.clone()),
                ..Default::default()
            })
            .await?;
        let merge_conflict = match pr {
            Some(number) if mergeable == Some(false) => Some(format!(
                "pull request #{number} does not merge cleanly into {0} (in the runner: `git merge origin/{0}`)",
                integration_branch(&ctx.op)
            )),
            _ => None,
        };
        let report = match recorded {
            Some(r) => AgentReport {
                exit_code: r.exit_code.or(conclusion_exit(conclusion)),
                output_tail: r.output_tail,
                turns_used: r.turns_used,
                usage: r.usage,
                evidence: Evidence {
                    commits,
                    uncommitted: vec![],
                    progress: r.progress,
                    criteria: r.criteria,
                    ci_passed,
                    ci_failures: ci_failures.clone(),
                    merge_conflict,
                    answer: r.answer,
                    refused: r.refused,
                    // The agent job does not look before its agent: a
                    // record that says otherwise is not taken at its word.
                    found_done: None,
                },
            },
            None => AgentReport {
                exit_code: conclusion_exit(conclusion).map(|c| c.max(1)),
                output_tail: match &forged {
                    Some(_) => format!("See {url}"),
                    None => format!(
                        "The workflow run ended `{}` without recording results (its trusted jobs did not finish). See {url}",
                        conclusion.unwrap_or("unknown")
                    ),
                },
                turns_used: None,
                usage: None,
                evidence: Evidence {
                    commits,
                    ci_passed,
                    ci_failures: ci_failures.clone(),
                    merge_conflict,
                    refused: forged,
                    ..Default::default()
                },
            },
        };
        // What the agent reported it cost replaces what it was expected to,
        // against the dollar caps. Only its own figure: a repository's
        // `prices:` never prices what the operator's caps are charged.
        if let Some(usd) = report.usage.and_then(|u| u.cost) {
            self.store.spend_priced(&d.0, usd).await?;
        }
        let input = Input::AgentFinished {
            dispatch: d.clone(),
            report: report.clone(),
        };
        let events = match self.decide(live, input).await? {
            Decided::Refused(_) => return Ok(()),
            Decided::Acted(events) => events,
        };
        let verdict = crate::engine::attempt_verdict(&events, u, s).or_else(|| {
            let st = live.driver.state.as_ref()?;
            Some(st.units[u].sprints[s].status())
        });
        let (attempt, model) = active
            .map(|a| (a.attempt, a.model_id))
            .unwrap_or((0, String::new()));
        let (conclusion, title, summary) =
            report::posts::sprint_check(&unit.name, &sprint, attempt, &model, &report, verdict);
        let check = json!({
            "name": format!("supervise: {} Sprint {}", unit.name, sprint.id),
            "head_sha": head,
            "status": "completed",
            "conclusion": conclusion,
            "external_id": d.0,
            "details_url": url,
            "output": { "title": title, "summary": summary },
        });
        if let Err(e) = repo.create_check(check).await {
            // The verdict is recorded; the check run is a report of it.
            tracing::warn!(error = %e, "could not publish the check run");
        }
        Ok(())
    }

    /// The repository's CI checks on `head` (everything but our own), once all
    /// have finished; None while one runs, or while none has reported yet and
    /// the grace for CI to start has not passed (CI reports a little after a
    /// push; a repository without CI waits out the grace once per head).
    pub(super) async fn ci_on(
        &self,
        runs: &mut RunsInFlight,
        repo: &Repo<'_>,
        head: &str,
    ) -> Result<Option<HeadChecks>, OpError> {
        let app = repo.gh.app_id();
        let (own, ci): (Vec<Check>, Vec<Check>) = repo
            .checks(head)
            .await?
            .into_iter()
            .partition(|c| c.is_supervisors(app));
        if ci.iter().any(|c| !c.completed) {
            return Ok(None);
        }
        if !runs.ci_reported(head, !ci.is_empty(), self.timings.ci_grace, Instant::now()) {
            return Ok(None);
        }
        Ok(Some(HeadChecks { ci, own }))
    }
}

/// The most failing checks whose words are gathered, and of each: the
/// characters of its summary, the annotations, and the lines and
/// characters of its log's end. A prompt has room for a failure's gist,
/// not for a whole log.
const CI_CHECKS: usize = 5;
const CI_SUMMARY_CHARS: usize = 1500;
const CI_ANNOTATIONS: usize = 10;
const CI_ANNOTATION_CHARS: usize = 300;
const CI_LOG_LINES: usize = 40;
const CI_LOG_CHARS: usize = 4000;

/// What the repository's failing checks said — summary, annotations, and
/// for an Actions job the end of its log — bounded and scrubbed: what the
/// next agent is shown. What cannot be read is left out (said in the log):
/// the verdict never waits on it.
async fn ci_failures(repo: &Repo<'_>, ci: &[Check]) -> Vec<CiFailure> {
    let mut out = Vec::new();
    for c in ci.iter().filter(|c| !c.green()).take(CI_CHECKS) {
        let annotations = match repo.annotations(c.id).await {
            Ok(list) => list
                .into_iter()
                .take(CI_ANNOTATIONS)
                .map(|a| {
                    let title = a.title.filter(|t| !t.is_empty()).map(|t| format!("{t}: "));
                    let line = format!(
                        "{}:{}: {}{}",
                        a.path,
                        a.start_line,
                        title.unwrap_or_default(),
                        a.message.unwrap_or_default()
                    );
                    bounded(
                        &line.split_whitespace().collect::<Vec<_>>().join(" "),
                        CI_ANNOTATION_CHARS,
                    )
                })
                .collect(),
            Err(e) => {
                tracing::warn!(check = %c.name, error = %e, "could not read the check's annotations");
                Vec::new()
            }
        };
        let log_tail = match c.job() {
            Some(job) => match repo.job_log(job).await {
                Ok(log) => log_tail(&log.unwrap_or_default()),
                Err(e) => {
                    tracing::warn!(check = %c.name, error = %e, "could not read the job's log");
                    String::new()
                }
            },
            None => String::new(),
        };
        out.push(CiFailure {
            name: bounded(&c.name, 100),
            conclusion: c.conclusion.clone().unwrap_or_else(|| "failed".into()),
            summary: bounded(c.summary.trim(), CI_SUMMARY_CHARS),
            annotations,
            log_tail,
        });
    }
    out
}

/// `text` cut to `max` characters and scrubbed of secrets.
fn bounded(text: &str, max: usize) -> String {
    let cut: String = text.chars().take(max).collect();
    crate::scrub::scrub(&cut).into_owned()
}

/// The end of a job's log as the next agent reads it: the last lines,
/// without the time GitHub puts before each, bounded and scrubbed.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((at, rest)) if chrono::DateTime::parse_from_rfc3339(at).is_ok() => rest,
            _ => l,
        })
        .collect();
    let tail = lines[lines.len().saturating_sub(CI_LOG_LINES)..].join("\n");
    // The end is what matters: cut from the front.
    let skip = tail.chars().count().saturating_sub(CI_LOG_CHARS);
    bounded(&tail.chars().skip(skip).collect::<String>(), CI_LOG_CHARS)
}

/// The check runs on a head, once its CI has finished.
pub(super) struct HeadChecks {
    /// The repository's own CI.
    pub ci: Vec<Check>,
    /// The supervisor's: its verdicts, and the trusted step's results records.
    pub own: Vec<Check>,
}

/// The results record at the head of a run's sprint branch, if the trusted
/// step vouched for it: a record check run for this dispatch on that head
/// whose digest is the file's. `Err` says why a record that is there is not
/// taken (it did not come from the trusted step). `others`, the checks by
/// anyone else, only shape that reason: a record vouched for by an App this
/// supervisor was not told to trust is still refused, and the refusal names
/// the App id to give it (the Action without `SUPERVISE_APP_ID`).
pub(super) fn vouched_record(
    dispatch: &str,
    file: Option<String>,
    own: &[Check],
    others: &[Check],
) -> Result<Option<RunResult>, String> {
    let Some(text) = file else { return Ok(None) };
    let vouches = |c: &&Check| {
        c.name == crate::contract::RECORD_CHECK
            && c.external_id == dispatch
            && crate::contract::vouches_for(&c.summary, text.as_bytes())
    };
    if !own.iter().any(|c| vouches(&c)) {
        if let Some(c) = others.iter().find(vouches) {
            let id = c
                .app_id
                .map_or_else(|| "its id".to_string(), |id| id.to_string());
            return Err(format!(
                "the results record `{}` is vouched for by the App `{}` (id {id}), which this supervisor was not told to trust, so it is not taken. If that is your agent workflow's App (its `SUPERVISE_APP_ID` secret), give the supervisor its id: the Action's `app-id: ${{{{ secrets.SUPERVISE_APP_ID }}}}` input, or `SUPERVISE_APP_ID={id}`",
                results_path(dispatch),
                c.app
            ));
        }
        return Err(format!(
            "the results record `{}` was not made by the agent workflow's trusted job (no `{}` check run vouches for it): an agent's job cannot write its own verdict. If the repository's agent workflow is an older copy, copy Sprint Supervisor's `.github/workflows/supervise-agent.yml` over it",
            results_path(dispatch),
            crate::contract::RECORD_CHECK
        ));
    }
    serde_json::from_str(&text).map(Some).map_err(|e| {
        format!(
            "the results record `{}` does not read: {e}",
            results_path(dispatch)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::{log_tail, vouched_record, CI_LOG_CHARS};
    use crate::contract::{record_digest_line, RECORD_CHECK};
    use crate::github::repo::Check;

    const DISPATCH: &str = "op-1/api/1/a1d1";
    fn record() -> String {
        serde_json::to_string(&crate::contract::RunResult::default()).unwrap()
    }

    /// The end of a job's log, as the next agent reads it: GitHub's times
    /// gone, the last lines kept, a long one cut from the front, secrets out.
    #[test]
    fn a_logs_end_is_its_last_lines_without_times() {
        let log: String = (1..=100)
            .map(|n| format!("2026-11-29T10:00:00.1234567Z line {n}\n"))
            .collect();
        let tail = log_tail(&log);
        assert!(
            tail.starts_with("line 61\n") && tail.ends_with("line 100"),
            "{tail}"
        );
        let long = format!("{}\nthe end", "x".repeat(10_000));
        assert!(log_tail(&long).ends_with("the end"));
        assert_eq!(log_tail(&long).chars().count(), CI_LOG_CHARS);
        let secret = "token ghp_0123456789abcdefghijABCDEFGHIJ012345 leaked";
        assert!(
            !log_tail(secret).contains("ghp_0123"),
            "{}",
            log_tail(secret)
        );
        // A line that only starts like a time keeps its words.
        assert_eq!(log_tail("2026 was a year"), "2026 was a year");
    }

    #[test]
    fn an_actions_checks_job_is_the_end_of_its_page() {
        let mut c = check("ci", "github-actions", 15368, "", "");
        c.details_url = Some("https://github.com/o/r/actions/runs/12/job/345".into());
        assert_eq!(c.job(), Some(345));
        c.details_url = Some("https://ci.example.com/builds/345".into());
        assert_eq!(c.job(), None);
        c.details_url = None;
        assert_eq!(c.job(), None);
    }

    fn check(name: &str, app: &str, app_id: u64, external_id: &str, summary: &str) -> Check {
        Check {
            id: 1,
            details_url: None,
            name: name.into(),
            app: app.into(),
            app_id: Some(app_id),
            completed: true,
            conclusion: Some("neutral".into()),
            external_id: external_id.into(),
            summary: summary.into(),
            text: String::new(),
        }
    }

    /// The checks the supervisor counts as its own, as the place filters
    /// a head's check runs (the App is 42).
    fn own(checks: Vec<Check>) -> Vec<Check> {
        checks
            .into_iter()
            .filter(|c| c.is_supervisors(Some(42)))
            .collect()
    }

    #[test]
    fn a_record_is_taken_only_with_the_right_digest_dispatch_and_app() {
        let record = record();
        let digest = record_digest_line(record.as_bytes());
        let taken =
            |checks: Vec<Check>| vouched_record(DISPATCH, Some(record.clone()), &own(checks), &[]);
        assert!(taken(vec![check(
            RECORD_CHECK,
            "supervise",
            42,
            DISPATCH,
            &digest
        )])
        .is_ok());
        assert!(taken(vec![check(
            RECORD_CHECK,
            "github-actions",
            15368,
            DISPATCH,
            &digest
        )])
        .is_ok());
        let wrong_digest = record_digest_line(b"another record");
        for (what, c) in [
            (
                "a wrong digest",
                check(RECORD_CHECK, "supervise", 42, DISPATCH, &wrong_digest),
            ),
            (
                "another dispatch",
                check(RECORD_CHECK, "supervise", 42, "op-1/api/1/a2d1", &digest),
            ),
            (
                "another App",
                check(RECORD_CHECK, "helpful-bot", 99, DISPATCH, &digest),
            ),
            (
                "another check's name",
                check(
                    "supervise: api Sprint 1",
                    "supervise",
                    42,
                    DISPATCH,
                    &digest,
                ),
            ),
            (
                "the digest inside a word",
                check(
                    RECORD_CHECK,
                    "supervise",
                    42,
                    DISPATCH,
                    &format!("x{digest}"),
                ),
            ),
        ] {
            let why = taken(vec![c]).expect_err(what);
            assert!(
                why.contains("not made by the agent workflow's trusted job"),
                "{what}: {why}"
            );
        }
        // No record at all is no record, not a refusal.
        assert!(matches!(vouched_record(DISPATCH, None, &[], &[]), Ok(None)));
        // A record vouched for by an App the supervisor was not given is
        // refused all the same, and the refusal names the id to give it.
        let why = vouched_record(
            DISPATCH,
            Some(record.clone()),
            &[],
            &[check(RECORD_CHECK, "my-supervisor", 77, DISPATCH, &digest)],
        )
        .expect_err("an App not trusted");
        assert!(
            why.contains("`my-supervisor` (id 77)") && why.contains("SUPERVISE_APP_ID=77"),
            "{why}"
        );
    }
}

#[cfg(test)]
mod ci_wait_tests {
    use super::RunsInFlight;
    use std::time::{Duration, Instant};

    /// A repository without CI is waited for once (the grace), then no
    /// more in that operation; a head with checks makes it wait again
    /// next time; the status line says the wait while it lasts.
    #[test]
    fn a_repository_without_ci_is_waited_for_once() {
        let grace = Duration::from_secs(30);
        let t0 = Instant::now();
        let mut runs = RunsInFlight::default();
        assert!(
            !runs.ci_reported("a1", false, grace, t0),
            "the first head waits"
        );
        assert_eq!(
            runs.waiting_for_ci(grace).as_deref(),
            Some("⏳ Waiting up to 30 s for CI checks to report on the newest work (a repository without CI waits this once per operation).")
        );
        assert!(!runs.ci_reported("a1", false, grace, t0 + Duration::from_secs(29)));
        assert!(
            runs.ci_reported("a1", false, grace, t0 + grace),
            "the grace is over"
        );
        assert_eq!(runs.waiting_for_ci(grace), None);
        assert!(
            runs.ci_reported("b2", false, grace, t0 + grace),
            "no wait again"
        );
        assert!(
            runs.ci_reported("c3", true, grace, t0 + grace),
            "checks: reported"
        );
        assert!(
            !runs.ci_reported("d4", false, grace, t0 + grace),
            "seen with CI: waits again"
        );
    }
}
