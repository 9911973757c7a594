//! What the supervisor does with what is said to it on GitHub, whichever door
//! the event came in by (`supervise serve` or the Action), once it is read
//! into an [`Event`]: a comment's commands are parsed, authorised against
//! the person's role and the repository's rules, carried out on the issue's
//! operation and answered in one reply; a `workflow_run` goes to its
//! operation; a `pull_request` that changes a plan gets the `supervise:
//! plan` check run; an approval by someone who may write lets the sprints
//! waiting for it merge now; a finished `check_suite` lets verifications
//! waiting for CI go on.

use crate::commands::auth::{self, Actor, Permission, Policy, Verdict};
use crate::commands::{help_text, parse_comment, Command, ParseError};
use crate::github::event::Event;
use crate::github::payload::{CheckSuiteEvent, CommentEvent, PullRequestEvent, ReviewEvent};
use crate::github::{GitHub, GitHubError};
use crate::place::hosted::{OpError, Operations, Origin, WorkflowKind};
use crate::store::sql::SqlStore;
use serde_json::{json, Value};
use std::sync::Arc;

/// The most commands one comment acts on; the rest are named as not read.
const MAX_COMMANDS: usize = 10;

/// Handles the events both doors receive.
pub struct Handler {
    pub store: SqlStore,
    pub github: Arc<GitHub>,
    pub ops: Arc<Operations>,
    /// Bot logins whose commands are acted on (exact match).
    pub bot_allow_list: Vec<String>,
    /// Commands per person, before any call to GitHub.
    pub throttle: super::throttle::CommandThrottle,
}

/// A comment with commands to act on, and the installation to act in.
struct ToActOn {
    ev: CommentEvent,
    installation: u64,
    commands: Vec<Result<Command, ParseError>>,
}

impl Handler {
    /// The person's role; a stranger (404) has none. Any other error is returned, so
    /// the delivery is retried later — nothing acts without an answer.
    /// An answer that is not a clear grant (a 422, a 4xx, an unreadable body) is
    /// `Ok(Err(why))`: the command is refused with a reply. Server errors and rate
    /// limits are `Err`, so the delivery is retried later.
    async fn permission(
        &self,
        p: &Origin,
        login: &str,
    ) -> Result<Result<Permission, String>, GitHubError> {
        Ok(p.repo(&self.github)
            .role(login)
            .await?
            .map(|role| Permission::parse(&role)))
    }

    /// The repository's rules from `.github/supervise.yml` (defaults when there is
    /// none), or the reason the file is unusable.
    async fn repo_policy(&self, p: &Origin) -> Result<Result<Policy, String>, GitHubError> {
        Ok(p.settings(&self.github)
            .await?
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|f| {
                Policy::from_settings(f.permissions.as_ref(), f.bots.as_deref())
                    .map_err(|e| format!(".github/supervise.yml: {e}"))
            }))
    }

    /// What the repository's rules and the person's role allow for one
    /// command. An unusable policy must not loosen a stricter one: only
    /// `help` acts then, and anything else is refused with the reason.
    fn verdict(
        &self,
        cmd: &Command,
        actor: &Actor<'_>,
        perm: &Result<Permission, String>,
        policy: &Result<Policy, String>,
    ) -> Verdict {
        let e = match policy {
            Ok(policy) => {
                return auth::authorise(cmd, actor, perm.clone(), &self.bot_allow_list, policy)
            }
            Err(e) => e,
        };
        match auth::authorise(cmd, actor, perm.clone(), &self.bot_allow_list, &Policy::default()) {
            Verdict::Allowed if *cmd != Command::Help => Verdict::Refused(format!(
                "I did not act because `.github/supervise.yml` is not valid:\n\n```\n{e}\n```\nPlease fix it and say the command again."
            )),
            v => v,
        }
    }

    /// The one reply to a comment, whatever it held (posted once: a re-processed
    /// delivery finds it by its marker).
    async fn reply(&self, p: &Origin, text: &str) -> Result<(), GitHubError> {
        let repo = p.repo(&self.github);
        // Only comments made since the command are looked through: a long thread
        // cannot push an earlier reply of ours off the page.
        let marker = format!("<!-- supervise:reply {} -->", p.comment);
        repo.comment_once(p.said_on, p.created_at.as_deref(), &marker, text)
            .await
    }

    /// The issue of the operation whose pull request (a sprint's, or the
    /// final one from its integration branch) `p` was said on: a command
    /// there acts on that operation, as on its issue, and is answered where
    /// it was said. `None` for any other pull request.
    async fn operation_issue_of_pull(&self, p: &Origin) -> Result<Option<i64>, OpError> {
        let pull = p.repo(&self.github).pull(p.said_on).await?;
        let Some(op) = pull
            .head_branch
            .as_deref()
            .and_then(crate::contract::operation_of_branch)
        else {
            return Ok(None);
        };
        Ok(self
            .ops
            .store
            .operation(op)
            .await?
            .filter(|row| row.repo == p.repo)
            .map(|row| row.issue))
    }

    /// What of a comment is acted on — `None` when there is nothing to act
    /// on (an edit or a deletion, no command, no installation).
    fn comment_to_act_on(
        &self,
        ev: &CommentEvent,
    ) -> Option<(u64, Vec<Result<Command, ParseError>>)> {
        // Only new comments act: edits and deletions never do.
        let installation = self
            .installation(ev.installation)
            .filter(|_| ev.action == "created")?;
        let commands = parse_comment(&ev.body);
        (!commands.is_empty()).then_some((installation, commands))
    }

    /// The installation to check a pull request in — `None` when it is not
    /// worth checking (see [`PullRequestEvent::worth_checking`]).
    fn pull_to_check(&self, ev: &PullRequestEvent) -> Option<u64> {
        self.installation(ev.installation)
            .filter(|_| ev.worth_checking())
    }

    /// The installation a delivery acts in: its own; with a token (the
    /// Action), events carry none and need none.
    fn installation(&self, given: Option<u64>) -> Option<u64> {
        given.or(self.github.is_token().then_some(0))
    }

    /// Whether [`Handler::event`] may do anything with this delivery:
    /// `false` only when it certainly does nothing — so the service can
    /// store such a delivery as done instead of queueing it for a worker
    /// (most comments carry no command).
    pub fn may_act(&self, ev: &Event) -> bool {
        match ev {
            Event::IssueComment(c) => self.comment_to_act_on(c).is_some(),
            Event::PullRequest(pr) => self.pull_to_check(pr).is_some(),
            Event::CheckSuite(suite) => suite.may_matter(),
            Event::PullRequestReview(review) => review.concerns_a_sprint(),
            Event::WorkflowRun(_) => true,
        }
    }

    /// Acts on a comment (from a delivery, or the comment the Action's
    /// `workflow_dispatch` posts and hands on).
    pub async fn comment(&self, ev: CommentEvent) -> Result<(), OpError> {
        match self.comment_to_act_on(&ev) {
            Some((installation, commands)) => {
                self.act_on(ToActOn {
                    ev,
                    installation,
                    commands,
                })
                .await
            }
            None => Ok(()),
        }
    }

    async fn act_on(&self, act: ToActOn) -> Result<(), OpError> {
        let ToActOn {
            ev,
            installation,
            commands,
        } = act;
        let place = Origin::new(
            installation,
            ev.repo.clone(),
            ev.issue,
            ev.comment_id,
            ev.created_at.clone(),
            ev.login.clone(),
        );
        let login = ev.login.as_str();
        if !self
            .throttle
            .admit(&ev.repo, login, std::time::Instant::now())
        {
            metrics::counter!("supervise_commands_throttled_total").increment(1);
            tracing::info!(
                login,
                repo = %ev.repo,
                "more commands from one person than the throttle allows; not acted on (no call to GitHub)"
            );
            return Ok(());
        }
        let actor = Actor {
            login,
            kind: &ev.kind,
        };
        let policy = self.repo_policy(&place).await?;
        let perm = self.permission(&place, login).await?;
        // A person who cannot even read the repository is not answered at all:
        // otherwise anyone could make the bot post on any public issue.
        let stranger = perm == Ok(Permission::None);
        let mut place = place;
        if ev.is_pull_request && !stranger {
            if let Some(issue) = self.operation_issue_of_pull(&place).await? {
                place.issue = issue;
            }
        }
        let total = commands.len();
        let mut answers: Vec<String> = Vec::new();
        let mut mistakes = false;
        let mut helped = false;
        for (n, parsed) in commands.into_iter().take(MAX_COMMANDS).enumerate() {
            // A mistake is answered like `help`: to anyone who may read the repository.
            let cmd = parsed.clone().unwrap_or(Command::Help);
            let verdict = self.verdict(&cmd, &actor, &perm, &policy);
            match verdict {
                Verdict::Ignored => continue,
                Verdict::Refused(_) if stranger => {
                    tracing::info!(
                        login,
                        "a command from someone without access to the repository; not answered"
                    );
                    continue;
                }
                _ => {}
            }
            if answers.is_empty() {
                place
                    .repo(&self.github)
                    .react(place.comment, "eyes")
                    .await?;
            }
            let text = match (verdict, parsed) {
                (Verdict::Refused(why), _) => why,
                (_, Err(e)) => {
                    mistakes = true;
                    e.to_string()
                }
                (_, Ok(cmd)) => {
                    helped |= cmd == Command::Help;
                    self.answer(&place, login, n, &cmd).await?
                }
            };
            answers.push(text);
        }
        if answers.is_empty() {
            return Ok(());
        }
        let mut text = if answers.len() == 1 {
            answers.remove(0)
        } else {
            answers
                .iter()
                .enumerate()
                .map(|(i, a)| format!("**{}.** {a}", i + 1))
                .collect::<Vec<_>>()
                .join("\n\n---\n\n")
        };
        // A mistake is answered with the list of commands, once per reply.
        if mistakes && !helped {
            text.push_str("\n\n");
            text.push_str(&help_text());
        }
        if total > MAX_COMMANDS {
            text.push_str(&format!(
            "\n\n_I acted on the first {MAX_COMMANDS} commands of this comment; the other {} were not read. Put them in another comment._",
            total - MAX_COMMANDS
        ));
        }
        Ok(self.reply(&place, &text).await?)
    }

    /// Every event either door hands on, read once where it arrived.
    pub async fn event(&self, ev: Event) -> Result<(), OpError> {
        match ev {
            Event::IssueComment(c) => self.comment(c).await,
            Event::WorkflowRun(run) => self.ops.workflow_run(run).await,
            Event::PullRequest(pr) => self.pull_request(pr).await,
            Event::CheckSuite(suite) => self.check_suite(suite).await,
            Event::PullRequestReview(review) if review.concerns_a_sprint() => {
                self.reviewed(review).await
            }
            Event::PullRequestReview(_) => Ok(()),
        }
    }

    /// A review of a sprint's pull request: the operations waiting for a
    /// review look now — an approval merges, a request for changes starts a
    /// fix round (a stranger's is answered there, and acted on by nobody),
    /// a dismissal may leave one approval too few. Anyone can review a
    /// public repository's pull request; a stranger's approval costs one
    /// question and moves nothing.
    async fn reviewed(&self, review: ReviewEvent) -> Result<(), OpError> {
        let Some(installation) = self.installation(review.installation) else {
            return Ok(());
        };
        let repo = crate::github::repo::Repo {
            gh: &self.github,
            installation,
            name: &review.repo,
        };
        if review.asks_changes_of_a_final_pull() {
            return self.final_review(&review, &repo).await;
        }
        if review.state != "approved"
            || crate::place::hosted::may_write(&repo, &review.login).await?
        {
            self.ops.reviewed(&review.repo).await
        } else {
            tracing::info!(login = %review.login, "an approval by someone who cannot write; not acted on");
            Ok(())
        }
    }

    /// Changes asked for on an operation's final pull request: by someone
    /// who may write, the operation gets a "review fixes" unit (see
    /// `engine::decide::review`) and the reviewer is told so there; anyone
    /// else is answered and not acted on.
    async fn final_review(
        &self,
        review: &ReviewEvent,
        repo: &crate::github::repo::Repo<'_>,
    ) -> Result<(), OpError> {
        use super::reviews;
        let Some(op) = crate::contract::operation_of_branch(&review.head_ref) else {
            return Ok(());
        };
        let Some(row) = self
            .ops
            .store
            .operation(op)
            .await?
            .filter(|r| r.repo == review.repo)
        else {
            return Ok(());
        };
        let who = (review.id, review.login.as_str());
        if !crate::place::hosted::may_write(repo, &review.login).await? {
            return Ok(reviews::not_acted_on(repo, op, review.number, who).await?);
        }
        let feedback =
            reviews::feedback(repo, review.number, who, &review.commit, &review.body).await?;
        let input = crate::engine::Input::FinalChangesRequested { review: feedback };
        let said = match self.ops.decide_on(&review.repo, row.issue, input).await? {
            Some((_, crate::drive::Decided::Acted(events))) if !events.is_empty() => {
                "A fix round for this review runs on the operation's integration branch (a `review fixes` unit after the others). When it is merged, the whole plan is verified again on the new head, and this pull request and the final report show it.".to_string()
            }
            Some((_, crate::drive::Decided::Refused(r))) => r.to_string(),
            // Told twice, or the operation is gone: said already, or nothing to say.
            _ => return Ok(()),
        };
        let marker =
            crate::report::posts::notice_marker(op, &format!("final-review-{}", review.id));
        repo.comment_once(review.number, None, &marker, &said)
            .await?;
        Ok(())
    }

    /// A finished check suite: verifications waiting for CI on its head go on.
    async fn check_suite(&self, suite: CheckSuiteEvent) -> Result<(), OpError> {
        if !suite.may_matter() {
            return Ok(());
        }
        self.ops.check_suite(&suite).await
    }

    /// A pull request opened or pushed to: if it changes a plan, the plan at its
    /// head is read and analysed (never run) and the verdict published as the
    /// check run `supervise: plan`, with annotations on the plan's lines.
    async fn pull_request(&self, ev: PullRequestEvent) -> Result<(), OpError> {
        use crate::report::plan_check;
        let Some(installation) = self.pull_to_check(&ev) else {
            return Ok(());
        };
        let repo = crate::github::repo::Repo {
            gh: &self.github,
            installation,
            name: &ev.repo,
        };
        let changed: Vec<String> = repo
            .pull_files(ev.number)
            .await?
            .into_iter()
            .filter(|f| plan_check::is_plan_file(f))
            .collect();
        if changed.is_empty() {
            return Ok(());
        }
        let mut plans = Vec::new();
        for path in changed {
            if let Some((text, _)) = repo.file(&path, Some(&ev.head_sha)).await? {
                plans.push((path, text));
            }
        }
        let max_turns = crate::engine::EngineConfig::default().max_turns;
        let check = plan_check::plan_check(&plans, max_turns);
        let annotations: Vec<Value> = check
            .annotations
            .iter()
            .map(|a| {
                json!({
                    "path": a.path,
                    "start_line": a.line,
                    "end_line": a.line,
                    "annotation_level": a.level.as_str(),
                    "title": a.title,
                    "message": a.message,
                })
            })
            .collect();
        repo.create_check(json!({
            "name": plan_check::NAME,
            "head_sha": ev.head_sha,
            "status": "completed",
            "conclusion": check.conclusion,
            "output": {
                "title": check.title,
                "summary": check.summary,
                "annotations": annotations,
            },
        }))
        .await?;
        Ok(())
    }

    /// `/supervise breakdown [doc]`: the issue's text (or the document on the
    /// default branch) broken down into a plan, proposed as a pull request —
    /// never pushed to the default branch. Said again, it updates the same
    /// pull request.
    async fn breakdown(&self, p: &Origin, doc: Option<&str>) -> Result<String, OpError> {
        use crate::plan::tools::breakdown as bd;
        let repo = p.repo(&self.github);
        let branch = repo.default_branch().await?;
        let repo_name = p.repo.rsplit('/').next().unwrap_or(&p.repo).to_string();
        let (source, text, project) = match doc {
            Some(path) => match repo.file(path, Some(&branch)).await? {
                Some((text, _)) => (format!("`{path}` on `{branch}`"), text, repo_name),
                None => return Ok(bd::no_document(path, &branch)),
            },
            None => {
                let issue = repo.issue(p.issue).await?;
                let title = if issue.title.trim().is_empty() {
                    repo_name
                } else {
                    issue.title
                };
                (
                    format!("issue #{}", p.issue),
                    issue.body.unwrap_or_default(),
                    title,
                )
            }
        };
        let b = bd::breakdown(&text, &project);
        if b.requirements.is_empty() {
            return Ok(bd::no_requirements(&source));
        }
        let plan_path = match doc {
            Some(path) => bd::plan_beside(path),
            None => "EXECUTION_PLAN.md".to_string(),
        };
        let head = format!("supervise-breakdown/issue-{}", p.issue);
        let summary = bd::summary(
            &b,
            &source,
            &format!("`{plan_path}`"),
            "`/supervise analyze` once it is merged, or `supervise plan analyze` on the branch",
        );
        let body = format!(
            "{summary}\nGenerated by `/supervise breakdown` from {source}. Nothing is prioritised yet; review the units, sprints and exit criteria, change what you like on this branch, and merge when it says what you want built.\n"
        );
        let number = repo
            .propose(
                &head,
                &[(plan_path.as_str(), b.plan.as_str())],
                &format!("Plan for {}", b.project),
                &body,
            )
            .await?;
        Ok(format!(
            "{summary}\nProposed in pull request #{number} (branch `{head}`)."
        ))
    }

    /// `analyze`, `evaluate`, `prioritize` on the plan of the default branch:
    /// the diagnosis as the reply (nothing is written to the repository).
    async fn plan_tool(&self, p: &Origin, cmd: &Command) -> Result<String, OpError> {
        use crate::plan::tools;
        let repo = p.repo(&self.github);
        let branch = repo.default_branch().await?;
        let path = "EXECUTION_PLAN.md";
        let Some((source, _)) = repo.file(path, Some(&branch)).await? else {
            return Ok(format!(
                "There is no `{path}` on `{branch}` to {}. Commit one first.",
                cmd.name()
            ));
        };
        let plan = match crate::plan::parse(&source, path) {
            Ok(plan) => plan,
            Err(problems) => {
                let e = crate::plan::PlanError {
                    path: path.into(),
                    problems,
                };
                return Ok(format!(
                    "`{path}` on `{branch}` cannot be read:\n\n```\n{e}```"
                ));
            }
        };
        const TURNS: u32 = 50;
        Ok(match cmd {
            Command::Analyze => {
                let a = tools::analyze::analyze(&plan, &source, TURNS);
                let report = tools::analyze::report(
                    &a,
                    path,
                    &chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                );
                format!(
                    "## Analysis Complete\n\n`{path}` on `{branch}`, {TURNS} turns per sprint.\n\n{}\n<details><summary>The whole report (ANALYSIS_REPORT.md)</summary>\n\n{report}\n</details>",
                    tools::analyze::summary(&a)
                )
            }
            Command::Evaluate => {
                let diagnosis = format!(
                    "## Evaluation of `{path}` on `{branch}`\n\n{}",
                    tools::evaluate::render(&tools::evaluate::evaluate(&plan, TURNS))
                );
                let rw = tools::rewrite::evaluated(&plan, &source, TURNS);
                let summary = tools::rewrite::evaluate_summary(&plan, &rw, TURNS);
                let proposed = self
                    .propose_rewrite(
                        p,
                        "evaluate",
                        path,
                        &source,
                        &rw.text,
                        &format!("Evaluate the plan: {} change(s)", rw.changes.len()),
                        &summary,
                    )
                    .await?;
                format!("{diagnosis}\n{proposed}")
            }
            _ => {
                let diagnosis = format!(
                    "## Priorities of `{path}` on `{branch}`\n\n{}",
                    tools::prioritize::render(&tools::prioritize::prioritize(&plan))
                );
                let rw = tools::rewrite::prioritized(&plan, &source);
                let summary = tools::rewrite::prioritize_summary(&plan, &rw);
                let proposed = self
                    .propose_rewrite(
                        p,
                        "prioritize",
                        path,
                        &source,
                        &rw.text,
                        "Prioritize the plan's sprints",
                        &summary,
                    )
                    .await?;
                format!("{diagnosis}\n{proposed}")
            }
        })
    }

    /// A plan tool's rewrite, proposed as a pull request from
    /// `supervise-<tool>/issue-<n>` (updated if it is there); what to say
    /// about it. A rewrite that changes nothing, or would not read back, is
    /// said and not proposed.
    #[allow(clippy::too_many_arguments)]
    async fn propose_rewrite(
        &self,
        p: &Origin,
        tool: &str,
        path: &str,
        source: &str,
        text: &str,
        title: &str,
        summary: &str,
    ) -> Result<String, OpError> {
        if text == source {
            return Ok(format!(
                "`/supervise {tool}` has nothing to change in `{path}`."
            ));
        }
        if let Err(problems) = crate::plan::parse(text, path) {
            tracing::error!(
                tool,
                problems = problems.len(),
                "a plan rewrite did not read back; not proposed"
            );
            return Ok(format!("The rewrite of `{path}` would not read back, so it is not proposed (an internal error: please report it with the plan)."));
        }
        let body = format!(
            "{summary}\nProposed by `/supervise {tool}` on #{}. Only what the tool owns changed; every other line of `{path}` is as it was. Review the diff, change what you like on this branch, and merge when it is right.\n",
            p.issue
        );
        let number = p
            .repo(&self.github)
            .propose(
                &format!("supervise-{tool}/issue-{}", p.issue),
                &[(path, text)],
                title,
                &body,
            )
            .await?;
        Ok(format!("{summary}\nProposed in pull request #{number}."))
    }

    async fn answer(
        &self,
        p: &Origin,
        login: &str,
        n: usize,
        cmd: &Command,
    ) -> Result<String, OpError> {
        let ops = &self.ops;
        let argument = cmd.argument();
        let name = if cmd.name().is_empty() {
            "default"
        } else {
            cmd.name()
        };
        self.store
            .record_command(
                &format!("{}:{}", p.comment, n),
                &p.repo,
                p.issue,
                login,
                name,
                argument.as_deref(),
            )
            .await?;
        let on_operation = |cmd: &Command| {
            let on = cmd.on_operation();
            async move {
                match on {
                    Some((input, on)) => ops.command(&p.repo, p.issue, input, on).await,
                    None => Ok(help_text()),
                }
            }
        };
        // One arm per command: what it does here.
        let text = match cmd {
        Command::Help => Ok(help_text()),
        Command::Version => Ok(format!("Sprint Supervisor {}", env!("CARGO_PKG_VERSION"))),
        Command::Spend => ops.spend(p).await,
        Command::Status => ops.status(&p.repo, p.issue).await.map(|s| {
            s.unwrap_or_else(|| {
                "No operation has been started on this issue yet. Comment `/supervise start` to begin.".to_string()
            })
        }),
        Command::Start { plan } => ops.start(p, plan.as_deref()).await,
        // §: resume when an operation exists here, otherwise start.
        Command::Default => match ops.on_issue(&p.repo, p.issue).await? {
            Some(_) => on_operation(&Command::resume_all()).await,
            None => ops.start(p, None).await,
        },
        Command::Operation { .. } => on_operation(cmd).await,
        Command::Analyze | Command::Evaluate | Command::Prioritize => self.plan_tool(p, cmd).await,
        Command::Breakdown { doc, offline: true } => self.breakdown(p, doc.as_deref()).await,
        Command::Breakdown { doc, offline: false } => {
            self.ops.start_breakdown(p, doc.as_deref()).await
        }
        Command::Solve { scope, extra } => ops.start_without_plan(p, WorkflowKind::Solve(*scope), extra).await,
        Command::Manage { extra } => ops.start_without_plan(p, WorkflowKind::Manage, extra).await,
    };
        match text {
            Ok(t) => Ok(t),
            // A permanent refusal from GitHub (a missing repository, a protected
            // branch) is the person's to fix: say so instead of retrying for ever.
            Err(e) if !e.is_transient() => Ok(format!(
                "Sprint Supervisor could not carry out `/supervise {name}`:\n\n```\n{e}\n```"
            )),
            Err(e) => Err(e),
        }
    }
}
