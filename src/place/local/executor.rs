//! The local place agents run in: the [`Executor`] that carries the engine's
//! effects out with local processes, each agent in a git worktree of its
//! sprint's branch, merges into the operation's integration branch, build
//! gates and condition polls run here, and the report files beside the plan.

use super::git::Git;
use super::process::{self, RunSpec, Watched};
use super::screen::{Msg, Screen};
use crate::attempt::{
    criteria,
    head::{self, Landing},
};
use crate::contract::{integration_branch, sprint_branch, RunResult};
use crate::drive::{Entry, Executor, Failure, Outcome};
use crate::engine::{
    self, done_before, AgentReport, Effect, Evidence, Input, NoticeKind, OperationState,
    SprintStatus,
};
use crate::plan::{Criterion, LoadedPlan, SprintId, WorkUnit};
use crate::report;
use crate::settings::Settings;
use anyhow::{anyhow, Context, Result};
use std::collections::{HashMap, HashSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::time::Duration;

/// A local effect that failed: nothing here passes by waiting, so each is final
/// (the person is told, and the engine hears what it needs to).
#[derive(Debug)]
pub struct LocalError(anyhow::Error);

impl std::fmt::Display for LocalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl Failure for LocalError {
    fn is_transient(&self) -> bool {
        false
    }
}

pub(super) struct LocalPlace {
    pub(super) plan: LoadedPlan,
    pub(super) dir: PathBuf,
    pub(super) git: Git,
    pub(super) settings: Settings,
    pub(super) screen: Box<dyn Screen>,
    pub(super) tx: Sender<Msg>,
    /// Runs whose end is being watched for.
    pub(super) watching: HashSet<engine::DispatchId>,
    /// Merged sprints found missing from the integration branch at the end.
    pub(super) lost_at_end: Vec<String>,
    /// The integration head this process's last merge left: while the branch
    /// still holds it, everything merged before is there too, and the
    /// per-sprint check (a history walk per merged sprint) is skipped.
    integrated_head: Option<git2::Oid>,
    /// A wrapper started ahead of the next dispatch.
    standby: process::StandbyPool,
    /// A decision asked for the reports to be rewritten. True at start: a
    /// crash may have come between a decision and its reports.
    status_due: bool,
    /// Worktrees (by name) of units whose last sprint is merged, to be
    /// removed once nothing waits on this process.
    merged_worktrees: Vec<String>,
    /// Where notices go besides the terminal (`notify:`, `--notify`).
    pub(super) notifier: crate::notify::Notifier,
    /// The agents' way to their model, when this process holds a
    /// provider's key: agents never do.
    model_proxy: Option<crate::model_proxy::ModelProxy>,
    /// Sprint heads whose wait for a review was told (`review.rs`).
    pub(super) review_told: HashSet<String>,
}

impl Drop for LocalPlace {
    /// The last notices (the operation completed, say) are sent before the
    /// command ends — waiting a few seconds at most for a receiver.
    fn drop(&mut self) {
        std::mem::take(&mut self.notifier).finish(std::time::Duration::from_secs(5));
    }
}

impl Executor for LocalPlace {
    type Error = LocalError;

    // Every step is synchronous (files, git, process launches): the future is
    // ready when first polled (see `drive::finish_now`).
    async fn carry_out(
        &mut self,
        state: Option<&OperationState>,
        entry: &Entry,
    ) -> Result<Outcome, LocalError> {
        if let (Effect::Notify { kind, unit, text }, Some(st)) = (&entry.effect, state) {
            let said = format!("{}{text}", report::notice_prefix(*kind));
            let notice =
                crate::notify::Notice::new(&st.id.0, entry.key, *kind, unit.as_deref(), &said);
            self.notifier.tell(*kind, notice);
        }
        if let (Effect::Integrate { unit, sprint, .. }, Some(st)) = (&entry.effect, state) {
            let branch = sprint_branch(&st.id.0, &st.unit_slug(unit), sprint.as_str());
            if let Some(outcome) = self
                .review_gate(st, unit, sprint, &branch)
                .map_err(LocalError)?
            {
                return Ok(outcome);
            }
        }
        self.effect(state, &entry.effect)
            .map(Outcome::Done)
            .map_err(LocalError)
    }

    async fn failed(&mut self, _entry: &Entry, error: &LocalError) {
        self.screen.notice(&format!("error: {error}"));
    }

    fn observe(&mut self, events: &[engine::Event]) {
        self.screen.events(events);
    }
}

impl LocalPlace {
    pub(super) fn new(
        plan: LoadedPlan,
        dir: PathBuf,
        git: Git,
        settings: Settings,
        screen: Box<dyn Screen>,
        tx: Sender<Msg>,
    ) -> LocalPlace {
        LocalPlace {
            plan,
            dir,
            git,
            screen,
            tx,
            watching: HashSet::new(),
            lost_at_end: Vec::new(),
            integrated_head: None,
            standby: process::StandbyPool::default(),
            notifier: crate::notify::Notifier::start(
                settings.notify.clone().into_iter().collect(),
                crate::notify::secret_from_env(),
            ),
            status_due: true,
            merged_worktrees: Vec::new(),
            review_told: HashSet::new(),
            model_proxy: model_proxy(),
            settings,
        }
    }

    pub(super) fn runs(&self) -> PathBuf {
        self.dir.join("runs")
    }

    /// The lock the current attempt in worktree `worktree` holds (see
    /// `process::run_agent`): a unit's sprints share one, and so its lock.
    fn worktree_lock(&self, worktree: &str) -> PathBuf {
        self.dir.join("locks").join(format!("{worktree}.lock"))
    }

    /// Watches a run (launched now, or adopted after a restart) for its end.
    pub(super) fn watch(&mut self, d: engine::DispatchId, child: Option<std::process::Child>) {
        if !self.watching.insert(d.clone()) {
            return;
        }
        let dir = process::run_dir(&self.runs(), &d.0);
        process::watch(dir, child, self.tx.clone(), move |w| match w {
            Watched::Finished => Msg::Finished(d.clone()),
            Watched::Activity => Msg::Activity(d.clone()),
        });
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(self.settings.verify_timeout_secs)
    }

    fn effect(&mut self, state: Option<&OperationState>, effect: &Effect) -> Result<Vec<Input>> {
        let st = state.ok_or_else(|| anyhow!("an effect before the operation started"))?;
        let op = st.id.0.as_str();
        let branch_of =
            |unit: &str, sprint: &SprintId| sprint_branch(op, &st.unit_slug(unit), sprint.as_str());
        match effect {
            Effect::Dispatch(order) => {
                let dir = process::run_dir(&self.runs(), &order.dispatch.0);
                let branch = branch_of(&order.unit, &order.sprint);
                // A unit whose last sprint was merged, dispatched again (a
                // merge was lost), keeps its worktree.
                let worktree = self.git.worktree_of(&branch);
                self.merged_worktrees.retain(|w| *w != worktree);
                // Replayed after a crash that came between the wrapper's start
                // and the effect's record: the run is under way (or over) and
                // is adopted as it is, whatever settings this process has (a
                // `stop` after a crash has no agent command, and must not turn
                // a live attempt into a failed one).
                if process::has_started(&dir) {
                    self.watch(order.dispatch.clone(), None);
                    return Ok(Vec::new());
                }
                let checkout = match self.git.ensure_sprint_worktree(op, &branch) {
                    Ok(c) => c,
                    Err(e) => {
                        return Ok(vec![Input::DispatchFailed {
                            dispatch: order.dispatch.clone(),
                            error: format!("{e:#}"),
                        }])
                    }
                };
                // A replay prepared before the crash keeps the command it was
                // prepared with when this process was given none.
                let agent = self
                    .settings
                    .agent
                    .clone()
                    .or_else(|| process::read_spec(&dir).map(|s| s.agent))
                    .ok_or_else(|| anyhow!("no agent command: pass --agent CMD or set `agent:` in .github/supervise.yml"))?;
                let (unit, sprint) = plan_sprint(st, &order.unit, &order.sprint)?;
                // A replay keeps the base the first preparation saw: the
                // agent may have committed since.
                let base = process::read_spec(&dir)
                    .and_then(|s| s.base)
                    .or_else(|| self.git.branch_head(&branch));
                // A token for this attempt, dead once the attempt could no
                // longer be running (its wall-clock cap, and the grace).
                let model_env = self.model_proxy.as_ref().map_or_else(Vec::new, |p| {
                    let ttl = Duration::from_secs(
                        st.config.max_agent_secs + 2 * self.settings.kill_grace_secs + 60,
                    );
                    p.grant(ttl).env
                });
                let spec = RunSpec {
                    order: order.clone(),
                    agent,
                    checkout,
                    unit,
                    sprint,
                    verify_timeout_secs: self.settings.verify_timeout_secs,
                    worktree_lock: Some(self.worktree_lock(&worktree)),
                    model_env,
                    sandbox: self.settings.sandbox.clone(),
                    branch,
                    base,
                    look_from: self.look_from(st, order),
                };
                let child = process::spawn(&dir, &spec, self.standby.take())?;
                self.watch(order.dispatch.clone(), child);
                self.standby.refill();
                Ok(Vec::new())
            }
            Effect::Cancel { dispatch, force } => {
                // `killall` is an emergency: a short grace, never longer than the setting.
                let grace = Duration::from_secs(if *force {
                    self.settings.kill_grace_secs.min(2)
                } else {
                    self.settings.kill_grace_secs
                });
                process::cancel(&process::run_dir(&self.runs(), &dispatch.0), grace);
                Ok(Vec::new())
            }
            Effect::Integrate {
                unit,
                sprint,
                dispatch,
            } => {
                // Agents can move refs: what was merged must still be there.
                // Looked for before this merge (whether the branch moved at
                // all is one look at the head merged last), mended after it:
                // this merge may bring the lost work back by itself.
                let branch = branch_of(unit, sprint);
                let lost = self.lost_merges(st)?;
                self.git.integrate(
                    op,
                    &branch,
                    &format!("Merge {unit} Sprint {sprint} ({dispatch})"),
                )?;
                self.record_merged(&branch)?;
                let mut follow: Vec<Input> = self
                    .restore(
                        op,
                        lost.into_iter().filter(|l| l.branch != branch).collect(),
                    )
                    .into_iter()
                    .map(|l| Input::MergeLost {
                        unit: l.unit,
                        sprint: l.sprint,
                        detail: format!(
                            "{} is not contained in {}",
                            l.branch,
                            integration_branch(op)
                        ),
                    })
                    .collect();
                self.integrated_head = Some(self.git.integration_head(op)?);
                // The unit's worktree goes with its last sprint (the others
                // move it on). Removed after the decisions at hand: deleting a
                // checkout takes as long as the checkout, and the next agent
                // need not wait.
                let last = st.plan.unit(unit).and_then(|u| u.sprints.last());
                if last.is_some_and(|s| s.id == *sprint) {
                    self.merged_worktrees.push(self.git.worktree_of(&branch));
                }
                follow.push(Input::Integrated {
                    unit: unit.clone(),
                    sprint: sprint.clone(),
                });
                Ok(follow)
            }
            Effect::RunGate { gate, layer, units } => {
                let cmd = self
                    .settings
                    .build_gate
                    .clone()
                    .unwrap_or_else(|| "true".into());
                let dir = self.git.gate_worktree(op)?;
                let phase = self.phase_merges(st, units)?;
                let root = self.git.gate_root(op);
                let (tx, gate, timeout) = (self.tx.clone(), *gate, self.timeout());
                self.screen.notice(&format!(
                    "🏗️  Phase {layer} complete ({}). Running coordinated build: {cmd}",
                    units.join(", ")
                ));
                std::thread::spawn(move || {
                    let run = |d: &Path| criteria::run_shell(&cmd, d, timeout);
                    let (passed, output) = run(&dir);
                    let blame = if passed {
                        engine::GateBlame::Unknown
                    } else {
                        phase.blame(&root, || run(&dir).0)
                    };
                    let _ = tx.send(Msg::Input(Box::new(Input::GateResult {
                        gate,
                        passed,
                        output,
                        blame,
                    })));
                });
                Ok(Vec::new())
            }
            Effect::PollCondition { unit, sprint } => {
                let branch = branch_of(unit, sprint);
                let checkout = self.git.ensure_sprint_worktree(op, &branch)?;
                let lock = self.worktree_lock(&self.git.worktree_of(&branch));
                let (_, s) = plan_sprint(st, unit, sprint)?;
                let (tx, unit, sprint, timeout) = (
                    self.tx.clone(),
                    unit.clone(),
                    sprint.clone(),
                    self.timeout(),
                );
                std::thread::spawn(move || {
                    // On the sprint's branch, as an attempt would be: the
                    // unit's worktree may still hold the sprint before.
                    let entered = process::lock_worktree_now(&lock).and_then(|held| {
                        super::git::enter_branch(&checkout, &branch).map(|_| held)
                    });
                    let _held = match entered {
                        Ok(held) => held,
                        Err(e) => {
                            let _ = tx.send(Msg::Input(Box::new(Input::ConditionPolled {
                                unit,
                                sprint,
                                met: false,
                                error: Some(format!("{e:#}")),
                                criteria: Vec::new(),
                            })));
                            return;
                        }
                    };
                    let results = criteria::verify_sprint(&s, &checkout, timeout);
                    let met = results
                        .iter()
                        .all(|r| r.outcome != engine::CriterionOutcome::Failed)
                        && results
                            .iter()
                            .any(|r| r.outcome == engine::CriterionOutcome::Passed);
                    let _ = tx.send(Msg::Input(Box::new(Input::ConditionPolled {
                        unit,
                        sprint,
                        met,
                        error: None,
                        criteria: results,
                    })));
                });
                Ok(Vec::new())
            }
            // The final summary (FinalReport, decided with it) opens with
            // the same line: a terminal shows it once.
            Effect::Notify {
                kind: NoticeKind::Completed,
                ..
            } => Ok(Vec::new()),
            Effect::Notify { kind, text, unit } => {
                let mut said = format!("{}{text}", report::notice_prefix(*kind));
                // Locally the sprint's work is also a checkout to look in.
                if let (NoticeKind::Blocked, Some(unit), Some(st)) = (kind, unit, state) {
                    if let Some(at) = self.blocked_worktree(st, unit) {
                        said.push_str(&format!("\nIts checkout: {at}"));
                    }
                }
                self.screen.notice(&said);
                Ok(Vec::new())
            }
            // Written once the decisions at hand are carried out (see
            // `after_effects`): a report is not worth an agent's wait.
            Effect::NamePlan { name } => {
                let file = self
                    .plan
                    .path
                    .file_name()
                    .map(PathBuf::from)
                    .unwrap_or_default();
                self.git.name_plan(op, &file, name)?;
                Ok(Vec::new())
            }
            // A local run's spend is the operation's state, already refunded.
            Effect::Refund { .. } => Ok(Vec::new()),
            Effect::PublishStatus => {
                self.status_due = true;
                Ok(Vec::new())
            }
            // The files are rewritten by the PublishStatus of the same decision.
            Effect::FinalReport => {
                let lost = self.lost_merges(st)?;
                self.lost_at_end = self
                    .restore(op, lost)
                    .into_iter()
                    .map(|l| l.branch)
                    .collect();
                // The verdict is about the head a person will merge: every
                // criterion runs again there before the summary is shown.
                let verification = self.verify_head(st)?;
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
                let st = &shown;
                if !self.lost_at_end.is_empty() {
                    self.screen.notice(&format!(
                        "⚠️  Work merged earlier is missing from {}: something moved it back. Merge it again:\n{}",
                        integration_branch(op),
                        self.lost_at_end
                            .iter()
                            .map(|b| format!("  git merge {b}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    ));
                }
                self.screen
                    .notice(&report::final_summary(st, &self.complete_path(st)));
                Ok(verification
                    .map(|verification| Input::HeadVerified { verification })
                    .into_iter()
                    .collect())
            }
        }
    }

    /// Every machine-checkable exit criterion of every completed sprint, run
    /// again in a clean checkout of the final integration head. One that
    /// fails there is traced to the merge after which it first failed, by
    /// bisecting the integration branch's first-parent line from the
    /// sprint's own merge (where it passed) to the head (where it fails):
    /// a run of the criterion per step, log2 of the merges in between.
    /// None for work without a plan: its later phases change what earlier
    /// ones made on purpose (a debug round, a rewrite).
    pub(super) fn verify_head(
        &self,
        st: &OperationState,
    ) -> Result<Option<engine::HeadVerification>> {
        if st.workflow.is_some() {
            return Ok(None);
        }
        let op = st.id.0.as_str();
        let head = self.git.integration_head(op)?;
        let root = self.git.gate_worktree_at(op, head)?;
        let criteria = st
            .completed_criteria()
            .into_iter()
            .map(|(unit, sprint, c)| (unit.to_string(), sprint.clone(), c));
        let mut checks = head::check_all(criteria, &root, self.timeout());
        if checks
            .iter()
            .any(|(c, _)| c.result.outcome == engine::CriterionOutcome::Failed)
        {
            let line = self.git.integration_line(op)?;
            let landings = self.landings(st, &line);
            for (check, criterion) in checks
                .iter_mut()
                .filter(|(c, _)| c.result.outcome == engine::CriterionOutcome::Failed)
            {
                // Where the sprint's work landed; the line's start for one
                // found done at start (its work was on it already).
                let landed = landings
                    .iter()
                    .find(|l| l.unit == check.unit && l.sprint == check.sprint)
                    .map_or(0, |l| l.at);
                let found = head::first_failing(landed, line.len(), |i| {
                    let root = self.git.gate_worktree_at(op, line[i]).ok()?;
                    Some(
                        criteria::check(criterion, &root, self.timeout()).0
                            == engine::CriterionOutcome::Failed,
                    )
                });
                if let Some(at) = found {
                    let by = line[at];
                    check.broken_by = Some(head::broken_by(
                        &landings,
                        at,
                        &by.to_string(),
                        &self.git.subject(by),
                    ));
                }
            }
        }
        self.git.remove_gate_worktree(op);
        Ok(Some(engine::HeadVerification {
            branch: integration_branch(op),
            head: head.to_string(),
            checks: checks.into_iter().map(|(c, _)| c).collect(),
        }))
    }

    /// Where each sprint whose agent's work this operation merged landed on
    /// the integration branch's first-parent `line`, in the order they landed.
    fn landings(&self, st: &OperationState, line: &[git2::Oid]) -> Vec<Landing> {
        let merged = self.merged_branches();
        let mut landings: Vec<Landing> = st
            .units
            .iter()
            .flat_map(|u| u.sprints.iter().map(move |s| (u, s)))
            // A sprint found done merged nothing of its own.
            .filter(|(_, s)| {
                s.completion
                    .as_ref()
                    .is_some_and(|c| c.already_done.is_none())
            })
            .filter_map(|(u, s)| {
                let branch = sprint_branch(&st.id.0, &u.slug, s.id.as_str());
                let commit = merged.get(&branch).copied().flatten()?;
                // The line only grows: once a commit of it holds the
                // merge, every later one does.
                let at = line.partition_point(|&c| !self.git.contains(c, commit));
                (at < line.len()).then_some(())?;
                Some(Landing {
                    unit: u.name.clone(),
                    sprint: s.id.clone(),
                    at,
                })
            })
            .collect();
        landings.sort_by_key(|l| l.at);
        landings
    }

    /// The merges of `units`' sprints on the integration branch, in the
    /// order they landed, and the commit before the first of them: where a
    /// failing gate's failure is looked for.
    fn phase_merges(&self, st: &OperationState, units: &[String]) -> Result<PhaseMerges> {
        let line = self.git.integration_line(&st.id.0)?;
        let landed: Vec<Landing> = self
            .landings(st, &line)
            .into_iter()
            .filter(|l| units.contains(&l.unit))
            .collect();
        let before = landed
            .first()
            .and_then(|l| l.at.checked_sub(1))
            .map(|i| line[i]);
        let merges = landed
            .into_iter()
            .map(|l| (l.unit, l.sprint, line[l.at]))
            .collect();
        Ok(PhaseMerges { before, merges })
    }

    /// `merged`: the sprint branches this operation has merged, each with the
    /// commit merged (`<branch> <commit>`), one per line, appended after each
    /// merge (a sprint whose merge is still in the outbox is not in it, so it
    /// is never taken for lost).
    fn merged_branches(&self) -> HashMap<String, Option<git2::Oid>> {
        std::fs::read_to_string(self.dir.join("merged"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let mut words = l.split(' ');
                let branch = words.next().unwrap_or_default().to_string();
                let commit = words.next().and_then(|c| git2::Oid::from_str(c).ok());
                (branch, commit)
            })
            .collect()
    }

    fn record_merged(&self, branch: &str) -> Result<()> {
        let commit = self.git.branch_head(branch).unwrap_or_default();
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("merged"))?;
        writeln!(f, "{branch} {commit}")?;
        Ok(())
    }

    /// COMPLETED sprints (merged by this operation) whose merged commit the
    /// integration branch no longer contains.
    fn lost_merges(&self, st: &OperationState) -> Result<Vec<LostMerge>> {
        if let Some(head) = self.integrated_head {
            if self.git.holds_commit(&st.id.0, head)? {
                return Ok(Vec::new());
            }
        }
        let merged = self.merged_branches();
        let mut lost = Vec::new();
        for u in &st.units {
            for s in &u.sprints {
                let branch = sprint_branch(&st.id.0, &u.slug, s.id.as_str());
                let Some(recorded) = merged.get(&branch) else {
                    continue;
                };
                // Lines from before the commit was recorded: the branch's head.
                let Some(commit) = recorded.or_else(|| {
                    self.git
                        .branch_head(&branch)
                        .and_then(|h| git2::Oid::from_str(&h).ok())
                }) else {
                    continue;
                };
                if s.status() == engine::SprintStatus::Completed
                    && !self.git.holds_commit(&st.id.0, commit)?
                {
                    lost.push(LostMerge {
                        unit: u.name.clone(),
                        sprint: s.id.clone(),
                        branch,
                        commit,
                    });
                }
            }
        }
        Ok(lost)
    }

    /// Merges lost work again from the commit that was verified and merged
    /// (never from its branch, which may have moved since): returns what could
    /// not be mended, which must be redone.
    fn restore(&mut self, op: &str, lost: Vec<LostMerge>) -> Vec<LostMerge> {
        lost.into_iter()
            .filter(|l| {
                let back = self.git.holds_commit(op, l.commit).unwrap_or(false)
                    || self
                        .git
                        .integrate_commit(
                            op,
                            l.commit,
                            &format!("Merge {} Sprint {} again: the integration branch had lost it", l.unit, l.sprint),
                        )
                        .is_ok();
                if back {
                    self.screen.notice(&format!(
                        "⚠️  {} Sprint {} was missing from {} (something moved it back); merged again from {}",
                        l.unit,
                        l.sprint,
                        integration_branch(op),
                        l.commit
                    ));
                }
                !back
            })
            .collect()
    }

    /// Where SUPERVISOR_STATE.md and COMPLETE_<NAME>.md go: beside the plan,
    /// or, for work without a plan, beside the workflow's own state (so a
    /// plan run and a workflow in one repository never write one file).
    pub(super) fn reports_dir(&self, st: &OperationState) -> &Path {
        match st.workflow {
            Some(_) => &self.dir,
            None => &self.plan.root,
        }
    }

    /// The worktree of `unit`'s FATAL sprint, as a person at the
    /// repository's root would `cd` to it.
    fn blocked_worktree(&self, st: &OperationState, unit: &str) -> Option<String> {
        let u = st.units.iter().find(|u| u.name == unit)?;
        let s = u
            .sprints
            .iter()
            .find(|s| s.status() == SprintStatus::Fatal)?;
        let branch = sprint_branch(&st.id.0, &u.slug, s.id.as_str());
        let path = self.git.worktree_path(&branch)?;
        let cwd = std::env::current_dir().unwrap_or_default();
        Some(
            path.strip_prefix(&cwd)
                .unwrap_or(&path)
                .display()
                .to_string(),
        )
    }

    /// Whether the integration branch's head is not the one last verified.
    pub(super) fn head_moved(&self, st: &OperationState) -> Result<bool> {
        let Some(v) = &st.head_verification else {
            return Ok(false);
        };
        Ok(self.git.integration_head(&st.id.0)?.to_string() != v.head)
    }

    /// COMPLETE_<NAME>.md as a person at the repository's root opens it.
    pub(super) fn complete_path(&self, st: &OperationState) -> String {
        let file = self.reports_dir(st).join(report::complete_file_name(st));
        file.strip_prefix(&self.plan.root)
            .unwrap_or(&file)
            .display()
            .to_string()
    }

    /// What waits until the decisions at hand are carried out, the next
    /// agents' launches first of all: the reports, if a decision asked for
    /// them, and the removal of merged sprints' worktrees. (A crash before it
    /// leaves a stale report, rewritten at the next start, and a worktree.)
    pub(super) fn after_effects(&mut self, st: &OperationState) -> Result<()> {
        if std::mem::take(&mut self.status_due) {
            self.publish(st)?;
        }
        for worktree in std::mem::take(&mut self.merged_worktrees) {
            self.git.remove_worktree(&worktree);
        }
        Ok(())
    }

    /// Rewrites SUPERVISOR_STATE.md and COMPLETE_<NAME>.md and refreshes the screen.
    pub(super) fn publish(&mut self, st: &OperationState) -> Result<()> {
        let runs = self.runs();
        let reports = self.reports_dir(st).to_path_buf();
        let output_file = |d: &engine::DispatchId| {
            process::run_dir(&runs, &d.0)
                .join("output.log")
                .strip_prefix(&reports)
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        write_file(
            &reports.join("SUPERVISOR_STATE.md"),
            &report::supervisor_state_md(st, &output_file),
        )?;
        if st
            .units
            .iter()
            .any(|u| u.sprints.iter().any(|s| s.completion.is_some()))
        {
            write_file(
                &reports.join(report::complete_file_name(st)),
                &report::complete_md(st, chrono::Utc::now()),
            )?;
        }
        self.screen.status(st);
        Ok(())
    }

    /// Why the sprint branch's work is refused unchecked, if it is.
    fn refusal(&self, st: &OperationState, branch: &str) -> Result<Option<String>> {
        let file = self
            .plan
            .path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (changed, plan_path, text) = self.git.branch_changes(&st.id.0, branch, &file)?;
        let rules = crate::engine::trust::Rules {
            plan: Some(&st.plan),
            plan_path: Some(&plan_path),
            workflows_allowed: self.settings.agent_may_change_workflows,
        };
        Ok(crate::engine::trust::refusal(
            &rules,
            &changed,
            text.as_deref(),
        ))
    }

    /// Where a fresh attempt may look for its sprint's work before its agent
    /// starts: not for work without a plan (its agents' answers are the
    /// workflow's next input, and only an agent gives one), nor for an
    /// operation whose starting commit was not kept.
    fn look_from(
        &self,
        st: &OperationState,
        order: &engine::DispatchOrder,
    ) -> Option<super::found_done::StartingPoint> {
        if order.kind != engine::DispatchKind::Fresh || st.workflow.is_some() {
            return None;
        }
        Some(super::found_done::StartingPoint {
            commit: self.git.start_commit(&st.id.0)?.to_string(),
            cache: self.dir.join("start-checks").join(&st.id.0),
        })
    }

    /// Turns a finished run into the engine's input: the wrapper's result plus the
    /// git evidence, read now (after any earlier merges) so a conflict is current.
    pub(super) fn finished_input(
        &self,
        st: &OperationState,
        d: &engine::DispatchId,
    ) -> Result<Option<Input>> {
        let Some((u, s)) = st.find_dispatch(d) else {
            return Ok(None);
        };
        let unit = &st.plan.work_units[u];
        let sprint = &unit.sprints[s];
        let branch = sprint_branch(&st.id.0, &st.units[u].slug, sprint.id.as_str());
        let dir = process::run_dir(&self.runs(), &d.0);
        let mut result = process::read_result(&dir).unwrap_or_else(|| RunResult {
            output_tail: criteria::tail(
                &std::fs::read_to_string(dir.join("output.log")).unwrap_or_default(),
                4000,
            ),
            ..Default::default()
        });
        // What the agent printed goes into the log, the reports and the
        // terminal: never a secret of this machine's environment.
        result.output_tail = crate::scrub::scrub(&result.output_tail).into_owned();
        let git = self.git.evidence(&st.id.0, &branch)?;
        // The same rule as on GitHub: work that changes what judges it (the
        // plan's criteria, the supervisor's records, the workflows) is refused.
        if result.refused.is_none() {
            result.refused = match self.refusal(st, &branch)? {
                Some(why) => Some(why),
                // Nor is work that carries a secret taken into the branch a
                // person merges.
                None => self.git.secret_in_branch(&st.id.0, &branch)?,
            };
            // Refused work is not built on: set aside, as on GitHub, where
            // it is never pushed.
            if let (Some(_), Some(base)) = (
                &result.refused,
                process::read_spec(&dir).and_then(|s| s.base),
            ) {
                self.git.set_aside(&branch, &base, &d.0)?;
            }
        }
        let checkout = self.git.ensure_sprint_worktree(&st.id.0, &branch).ok();
        let progress = checkout
            .as_deref()
            .and_then(|c| criteria::progress_marker(&st.plan, unit, sprint, c));
        let report = AgentReport {
            exit_code: result.exit_code,
            output_tail: result.output_tail,
            turns_used: result.turns_used,
            usage: result.usage,
            evidence: Evidence {
                commits: git.commits,
                uncommitted: git.uncommitted,
                progress,
                criteria: result.criteria,
                ci_passed: None,
                ci_failures: Vec::new(),
                merge_conflict: git.merge_conflict,
                answer: result.answer.map(|a| crate::scrub::scrub(&a).into_owned()),
                refused: result.refused,
                // Its note names commits by their subjects, which agents wrote.
                found_done: result.found_done.map(|mut f| {
                    f.by = crate::scrub::scrub(&f.by).into_owned();
                    f
                }),
            },
        };
        Ok(Some(Input::AgentFinished {
            dispatch: d.clone(),
            report,
        }))
    }

    /// §3 steps 4–5 at start: the sprints done before it, judged by
    /// [`done_before`] in a clean checkout of the starting commit (never the
    /// user's checkout), where the criteria's commands run too.
    pub(super) fn already_done(&self, op: &str) -> Result<Vec<engine::AlreadyDone>> {
        let root = self.git.gate_worktree(op)?;
        let mut commit = Checkout {
            root: &root,
            timeout: self.timeout(),
        };
        let found = done_before::already_done(&self.plan.plan, &mut commit).map_err(|unread| {
            anyhow!(
                "could not read {} at the starting commit",
                unread.join(", ")
            )
        });
        self.git.remove_gate_worktree(op);
        found
    }
}

/// The starting commit as a clean checkout: every file is there to read, and
/// the criteria's commands run in it.
struct Checkout<'a> {
    root: &'a Path,
    timeout: Duration,
}

impl done_before::StartingCommit for Checkout<'_> {
    fn read(&self, path: &str) -> done_before::Found {
        criteria::read_found(self.root, path)
    }

    fn run(&mut self, _unit: &WorkUnit, c: &Criterion) -> Option<bool> {
        criteria::check_command(c, self.root, self.timeout)
            .map(|(outcome, _)| outcome == engine::CriterionOutcome::Passed)
    }
}

/// A phase's merges on the integration branch, for a failing gate's blame.
struct PhaseMerges {
    /// The commit before the phase's first merge.
    before: Option<git2::Oid>,
    /// (unit, sprint, the first commit of the branch that holds its merge).
    merges: Vec<(String, SprintId, git2::Oid)>,
}

impl PhaseMerges {
    /// Where the failure came in: `passes` runs the gate in the checkout at
    /// `root` after each move. Before the phase's merges first; then a
    /// bisection of the merges for the first after which it fails (a gate
    /// runs a build: log₂ of the merges, not all of them). Unknown when a
    /// commit cannot be checked out, or the gate passes after every merge
    /// (what broke it came after them).
    fn blame(&self, root: &Path, mut passes: impl FnMut() -> bool) -> engine::GateBlame {
        let mut passes_at = |commit: git2::Oid| -> Option<bool> {
            super::git::reset_clean(root, commit).ok()?;
            Some(passes())
        };
        let (Some(before), false) = (self.before, self.merges.is_empty()) else {
            return engine::GateBlame::Unknown;
        };
        match passes_at(before) {
            None => return engine::GateBlame::Unknown,
            Some(false) => return engine::GateBlame::BeforePhase,
            Some(true) => {}
        }
        let last = self.merges.len() - 1;
        if passes_at(self.merges[last].2) != Some(false) {
            return engine::GateBlame::Unknown;
        }
        let (mut lo, mut hi) = (0, last);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match passes_at(self.merges[mid].2) {
                None => return engine::GateBlame::Unknown,
                Some(false) => hi = mid,
                Some(true) => lo = mid + 1,
            }
        }
        let (unit, sprint, _) = self.merges[lo].clone();
        engine::GateBlame::Merge { unit, sprint }
    }
}

/// A sprint whose merged work the integration branch no longer holds.
struct LostMerge {
    unit: String,
    sprint: SprintId,
    branch: String,
    commit: git2::Oid,
}

/// The plan's unit and sprint an order or poll names.
fn plan_sprint(
    st: &OperationState,
    unit: &str,
    sprint: &SprintId,
) -> Result<(crate::plan::WorkUnit, crate::plan::Sprint)> {
    let u = st
        .plan
        .unit(unit)
        .ok_or_else(|| anyhow!("unknown unit {unit}"))?;
    let s = u
        .sprints
        .iter()
        .find(|s| &s.id == sprint)
        .ok_or_else(|| anyhow!("unknown sprint {unit} Sprint {sprint}"))?;
    Ok((u.clone(), s.clone()))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("md.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The model proxy, when this process holds a provider's key. Holding one,
/// the process also makes itself undumpable, so that an agent running as the
/// same (unprivileged) user cannot read the key from `/proc/<pid>/environ`
/// or its memory.
fn model_proxy() -> Option<crate::model_proxy::ModelProxy> {
    match crate::model_proxy::ModelProxy::from_env() {
        Ok(Some(p)) => {
            // SAFETY: prctl(PR_SET_DUMPABLE) changes only this process's flag.
            unsafe {
                libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            }
            tracing::info!(addr = %p.addr(), "agents reach their model through the proxy");
            Some(p)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::error!("the model proxy did not start: {e:#}");
            eprintln!("The model proxy did not start ({e:#}); agents get no model key.");
            None
        }
    }
}
