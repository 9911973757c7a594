#![allow(dead_code)] // each test binary tells the stories it needs
//! The story harness for the service: a fake GitHub holding a repository, the
//! service in front of it, and a person (`mia`, a maintainer) who comments.
//! A story reads as what happens on GitHub — `say("/supervise start")`, then
//! `until("the final pull request", …)` — and waits on the fake's own change
//! notification, never on a polling timer.
//!
//! The service runs in one of two doors with the same story: in this process
//! (the default: quick to start, the same `server::run` the binary calls) or as
//! the real `supervise serve` binary, for stories that kill it with SIGKILL.

use crate::support::{self, free_port, spawn_serve, wait_listening, SECRET};
use fake_github::FakeGitHub;
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Child;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use supervise::place::hosted::{InstallationLimits, OpTimings};
use supervise::server::run::{self, ServiceConfig};

pub const REPO: &str = "acme/shop";

/// The agent runner's model-provider key in every story (see
/// `set_agent_workflow`): found nowhere afterwards.
pub const CANARY_KEY: &str = "canary-model-key-5e1f0c9a7b3d2f8e";
pub const ISSUE_TITLE: &str = "Ship the shop";
/// The App's sign-in credentials the fake and the service share.
pub const WEB_CLIENT_ID: &str = "Iv1.story";
pub const WEB_CLIENT_SECRET: &str = "story-client-secret-2f6c";

/// Three units in two layers: `web` needs `api` and `docs`.
pub const PLAN: &str = "# Shop\n\n| Work Unit | Directory | Layer |\n|---|---|---|\n| api | api | 0 |\n| docs | docs | 0 |\n| web | web | 1 |\n\n\
## api\n### Sprint 1: Implement the API types\n- [ ] `api/api-sprint-1.txt` exists\n### Sprint 2: Implement the handlers\n- [ ] `api/api-sprint-2.txt` exists\n\
## docs\n### Sprint 1: Write the guide\n- [ ] `docs/docs-sprint-1.txt` exists\n\
## web\n### Sprint 1: Build the page\n- [ ] `web/web-sprint-1.txt` exists\n";

pub const SETTINGS: &str = "max_parallel: 2\nbuild_gate: repository CI\nmodels:\n  haiku: claude-haiku\n  sonnet: claude-sonnet\n  opus: claude-opus\n";

/// Where the service runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Door {
    /// `server::run` in a task of the test's runtime.
    InProcess,
    /// The `supervise serve` binary, which a story may kill.
    Process,
    /// No service: the story brings its own (replicas, the Action).
    None,
}

/// What the repository holds and how the service is run.
pub struct Setup {
    /// The plan and settings, with CI and the agent workflow; `None`: an empty
    /// repository where only commands are tried.
    pub plan: Option<String>,
    /// Lines for the scripted agent (tests/agents/scripted.sh).
    pub behaviour: String,
    pub door: Door,
    /// Seconds a replica's lease on a delivery or an operation lasts.
    pub lease_secs: u64,
    pub reconcile_secs: u64,
    /// Work without a plan: the settings, with CI and the agent workflow
    /// playing every role (examples/agents/workflow-agent.sh), and the issue's text.
    pub without_plan: Option<(String, String)>,
    /// Where the fake GitHub keeps its repositories and runs, when not beside
    /// the service's database: a measurement of the service alone keeps the
    /// fake's disk writes (clones, pushes of every run) from delaying the
    /// service's fsyncs on a shared disk.
    pub github_dir: Option<std::sync::Arc<tempfile::TempDir>>,
    /// The operator's caps above one operation (in-process door only).
    pub limits: InstallationLimits,
    /// The operator's receiver of notices and its key (in-process door only).
    pub notify: Option<(String, String)>,
}

impl Setup {
    /// A repository with `plan`, its settings, CI and the agent workflow.
    pub fn operation(plan: &str, behaviour: &str) -> Setup {
        Setup {
            plan: Some(plan.into()),
            behaviour: behaviour.into(),
            door: Door::InProcess,
            lease_secs: 2,
            reconcile_secs: 1,
            without_plan: None,
            github_dir: None,
            limits: InstallationLimits::default(),
            notify: None,
        }
    }

    /// A repository with settings and no plan, an issue saying `issue_body`,
    /// and the agent that plays every role of work without a plan, reading
    /// `behaviour` (see examples/agents/workflow-agent.sh).
    pub fn without_plan(settings: &str, issue_body: &str, behaviour: &str) -> Setup {
        Setup {
            plan: None,
            behaviour: behaviour.into(),
            door: Door::InProcess,
            lease_secs: 2,
            reconcile_secs: 1,
            without_plan: Some((settings.into(), issue_body.into())),
            github_dir: None,
            limits: InstallationLimits::default(),
            notify: None,
        }
    }

    /// A repository without a plan, and readers and a bot beside `mia`.
    pub fn commands_only() -> Setup {
        Setup {
            plan: None,
            behaviour: String::new(),
            door: Door::InProcess,
            lease_secs: 120,
            reconcile_secs: 1,
            without_plan: None,
            github_dir: None,
            limits: InstallationLimits::default(),
            notify: None,
        }
    }

    pub fn door(mut self, door: Door) -> Setup {
        self.door = door;
        self
    }

    /// Seconds between reconciliations with GitHub (1 unless said).
    pub fn reconcile_secs(mut self, secs: u64) -> Setup {
        self.reconcile_secs = secs;
        self
    }

    /// The operator's receiver of notices, signing with `key`.
    pub fn notify(mut self, url: &str, key: &str) -> Setup {
        self.notify = Some((url.into(), key.into()));
        self
    }

    /// The operator's caps (the service's settings, not the repository's).
    pub fn limits(mut self, limits: InstallationLimits) -> Setup {
        self.limits = limits;
        self
    }

    pub fn lease_secs(mut self, secs: u64) -> Setup {
        self.lease_secs = secs;
        self
    }
}

enum Serving {
    InProcess {
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<anyhow::Result<()>>,
    },
    Process(Child),
}

pub struct Story {
    pub fake: Arc<FakeGitHub>,
    serving: Option<Serving>,
    door: Door,
    lease_secs: u64,
    reconcile_secs: u64,
    pub port: u16,
    pub db_url: String,
    pub tmp: tempfile::TempDir,
    pub issue: i64,
    _github_dir: Option<Arc<tempfile::TempDir>>,
    limits: InstallationLimits,
    notify: Option<(String, String)>,
}

impl Story {
    /// The three-unit plan, the service in this process.
    pub async fn begin(behaviour: &str) -> Story {
        Story::start(Setup::operation(PLAN, behaviour)).await
    }

    pub async fn begin_with(plan: &str, behaviour: &str) -> Story {
        Story::start(Setup::operation(plan, behaviour)).await
    }

    pub async fn start(setup: Setup) -> Story {
        let tmp = tempfile::tempdir().unwrap();
        let port = free_port();
        let github_dir = match &setup.github_dir {
            Some(d) => d.path().join("github"),
            None => tmp.path().join("github"),
        };
        let fake = support::fake_github(Some(port), Some(github_dir)).await;
        fake.ensure_repo(REPO);
        fake.add_user("mia", "maintain", "User");
        fake.set_oauth_app(WEB_CLIENT_ID, WEB_CLIENT_SECRET);
        if let Some(plan) = &setup.plan {
            fake.add_file(REPO, "EXECUTION_PLAN.md", plan);
            fake.add_file(REPO, ".github/supervise.yml", SETTINGS);
            fake.set_ci(REPO, "true");
            set_agent_workflow(&fake, REPO, tmp.path(), SCRIPTED_AGENT);
        } else if let Some((settings, _)) = &setup.without_plan {
            fake.add_file(REPO, ".github/supervise.yml", settings);
            fake.set_ci(REPO, "true");
            set_agent_workflow(&fake, REPO, tmp.path(), WORKFLOW_AGENT);
        } else {
            fake.add_user("rex", "read", "User");
            fake.add_user("renovate[bot]", "admin", "Bot");
        }
        std::fs::write(tmp.path().join("behaviour"), &setup.behaviour).unwrap();
        let issue = match &setup.without_plan {
            Some((_, body)) => fake.open_issue_with(REPO, ISSUE_TITLE, body),
            None => fake.open_issue(REPO, ISSUE_TITLE),
        };
        let db_url = format!(
            "sqlite://{}?mode=rwc",
            tmp.path().join("supervise.db").display()
        );
        let mut story = Story {
            fake,
            serving: None,
            door: setup.door,
            lease_secs: setup.lease_secs,
            reconcile_secs: setup.reconcile_secs,
            port,
            db_url,
            tmp,
            issue,
            _github_dir: setup.github_dir.clone(),
            limits: setup.limits,
            notify: setup.notify.clone(),
        };
        story.serve_up().await;
        story
    }

    /// Another repository of the same installation, with its plan, settings,
    /// CI and the agent workflow (the same scripted agent).
    pub fn add_repo(&self, repo: &str, plan: &str, settings: &str) {
        self.fake.ensure_repo(repo);
        self.fake.add_file(repo, "EXECUTION_PLAN.md", plan);
        self.fake.add_file(repo, ".github/supervise.yml", settings);
        self.fake.set_ci(repo, "true");
        set_agent_workflow(&self.fake, repo, self.tmp.path(), SCRIPTED_AGENT);
    }

    /// The scripted agent workflow, with the repository variables `vars`
    /// set for its jobs.
    pub fn set_workflow_vars(&self, vars: &[(&str, String)]) {
        set_agent_workflow_with(
            &self.fake,
            REPO,
            self.tmp.path(),
            SCRIPTED_AGENT,
            &support::shipped_agent_workflow(),
            vars,
        );
    }

    /// The agent workflow of the story's repository runs `agent` (a path
    /// in this crate) from now on.
    pub fn use_agent(&self, agent: &str) {
        set_agent_workflow(&self.fake, REPO, self.tmp.path(), agent);
    }

    /// The agent workflow of the story's repository is `yaml` (a changed
    /// copy of the shipped one) from now on: its jobs get what it grants.
    pub fn use_agent_workflow(&self, yaml: &str) {
        set_agent_workflow_as(&self.fake, REPO, self.tmp.path(), SCRIPTED_AGENT, yaml);
    }

    /// The story's repository runs real Claude Code (`claude`, the pinned
    /// `version` `npm` installs on the runner) through the shipped agent
    /// workflow, its model the scripted server at `model_url` (the
    /// repository's gateway variable).
    pub fn use_claude_code(&self, claude: &Path, version: &str, model_url: &str) {
        let mut planned = support::agent_workflow(
            &support::shipped_agent_workflow(),
            claude,
            &[("ANTHROPIC_API_KEY", "sk-ant-api03-scripted-model-key")],
        );
        planned.setup_mut().packages.insert(
            "@anthropic-ai/claude-code".into(),
            fake_github::workflow::Package {
                version: Some(version.to_string()),
                commands: vec![claude.to_path_buf()],
            },
        );
        planned
            .setup_mut()
            .vars
            .insert("SUPERVISE_ANTHROPIC_BASE_URL".into(), model_url.into());
        self.fake
            .set_workflow_yaml(REPO, "supervise-agent.yml", planned);
    }

    /// The story's repository runs a real agent CLI other than Claude
    /// Code through the shipped agent workflow, chosen by the variable
    /// SUPERVISE_AGENT (`kind`): `cli` is what the runner's `npm` installs
    /// for `package` at `version`; `vars` point it at the scripted model
    /// (its gateway variable); `secrets` hold its key; its settings name the
    /// preset and the tiers' `models`.
    #[allow(clippy::too_many_arguments)]
    pub fn use_agent_cli(
        &self,
        kind: &str,
        package: &str,
        cli: &Path,
        version: &str,
        vars: &[(&str, String)],
        secrets: &[(&str, &str)],
        models: [&str; 3],
    ) {
        let mut planned = support::agent_workflow(&support::shipped_agent_workflow(), cli, secrets);
        let setup = planned.setup_mut();
        setup.vars.insert("SUPERVISE_AGENT".into(), kind.into());
        for (k, v) in vars {
            setup.vars.insert(k.to_string(), v.clone());
        }
        setup.packages.insert(
            package.into(),
            fake_github::workflow::Package {
                version: Some(version.to_string()),
                commands: vec![cli.to_path_buf()],
            },
        );
        self.fake
            .set_workflow_yaml(REPO, "supervise-agent.yml", planned);
        self.fake.add_file(
            REPO,
            ".github/supervise.yml",
            &format!(
                "agent: {kind}\nmax_parallel: 2\nbuild_gate: repository CI\n\
                 models:\n  haiku: {}\n  sonnet: {}\n  opus: {}\n",
                models[0], models[1], models[2]
            ),
        );
    }

    /// Starts the service through the story's door (again, after a kill).
    pub async fn serve_up(&mut self) {
        match self.door {
            Door::None => return,
            Door::Process => {
                self.serving = Some(Serving::Process(spawn_serve(
                    self.port,
                    &self.fake.url(),
                    &self.db_url,
                    &fast_service(self.lease_secs, self.reconcile_secs),
                )));
            }
            Door::InProcess => {
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
                    .await
                    .unwrap();
                let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
                let notifier = match &self.notify {
                    Some((url, key)) => supervise::notify::Notifier::start(
                        vec![
                            supervise::notify::Hook::new(url, Default::default(), vec![]).unwrap(),
                        ],
                        Some(SecretString::from(key.clone())),
                    ),
                    None => Default::default(),
                };
                let config = ServiceConfig {
                    limits: self.limits,
                    notifier,
                    web: Some(run::WebSignIn {
                        client_id: WEB_CLIENT_ID.into(),
                        client_secret: SecretString::from(WEB_CLIENT_SECRET.to_string()),
                        web_url: self.fake.url(),
                        public_url: format!("http://localhost:{}", self.port),
                        session_key: None,
                    }),
                    ..in_process_config(
                        &self.fake.url(),
                        &self.db_url,
                        self.lease_secs,
                        self.reconcile_secs,
                    )
                };
                let task = tokio::spawn(run::run(config, listener, async {
                    let _ = stopped.await;
                }));
                self.serving = Some(Serving::InProcess { stop, task });
            }
        }
        wait_listening(self.port).await;
    }

    /// SIGKILLs the service: only a story told as a process may.
    pub fn kill_serve(&mut self) {
        match self.serving.take() {
            Some(Serving::Process(mut c)) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Some(Serving::InProcess { .. }) => {
                panic!("a story that kills the service runs it with Door::Process")
            }
            None => {}
        }
    }

    pub fn set_behaviour(&self, behaviour: &str) {
        std::fs::write(self.tmp.path().join("behaviour"), behaviour).unwrap();
    }

    pub async fn say(&self, body: &str) {
        self.say_on(self.issue, body).await;
    }

    pub async fn say_on(&self, issue: i64, body: &str) {
        self.fake.comment(REPO, issue, "mia", body, false).await;
    }

    /// Runs whose name carries `part` (a unit, a dispatch id).
    pub fn runs_of(&self, part: &str) -> Vec<fake_github::Run> {
        self.fake
            .runs(REPO)
            .into_iter()
            .filter(|r| r.display_title.contains(part))
            .collect()
    }

    /// The prompt a run was given: its `prompt` input, or the file on its
    /// sprint branch that input names (`@path`, a prompt too long to send).
    pub fn prompt_of(&self, run: &fake_github::Run) -> String {
        let input = run.inputs["prompt"].as_str().unwrap_or_default();
        match input.strip_prefix('@') {
            Some(path) => {
                let branch = run.inputs["branch"].as_str().unwrap_or_default();
                self.fake.file(REPO, branch, path).unwrap_or_default()
            }
            None => input.to_string(),
        }
    }

    pub fn unit_issue(&self, unit: &str) -> Option<fake_github::Issue> {
        self.fake
            .issues(REPO)
            .into_iter()
            .find(|i| i.title.starts_with(&format!("{unit} — ")))
    }

    /// The App's comments on `issue`, oldest first.
    pub fn bot_comments(&self, issue: i64) -> Vec<String> {
        self.fake
            .comments(REPO, issue)
            .into_iter()
            .filter(|c| {
                [fake_github::APP_LOGIN, fake_github::ACTIONS_LOGIN].contains(&c.user.as_str())
            })
            .map(|c| c.body)
            .collect()
    }

    pub fn status_comment(&self) -> String {
        self.status_comment_on(self.issue)
    }

    pub fn status_comment_on(&self, issue: i64) -> String {
        let found: Vec<String> = self
            .bot_comments(issue)
            .into_iter()
            .filter(|b| b.contains("<!-- supervise:status "))
            .collect();
        assert!(
            found.len() <= 1,
            "one sticky status comment, not {}",
            found.len()
        );
        found.into_iter().next().unwrap_or_default()
    }

    /// Waits until `done` holds, failing with what GitHub shows if it never does.
    pub async fn until(&self, what: &str, secs: u64, done: impl Fn(&Story) -> bool) {
        self.until_on(self.issue, what, secs, done).await
    }

    /// Looks again each time the fake GitHub changes, up to `secs`.
    pub async fn until_on(&self, issue: i64, what: &str, secs: u64, done: impl Fn(&Story) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let mut changes = self.fake.changes();
        loop {
            changes.borrow_and_update();
            if done(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
                && !done(self)
            {
                panic!(
                    "{what}: not after {secs} s.\nstatus comment:\n{}\ncomments: {:#?}\non other issues: {:#?}\nruns: {:#?}",
                    self.status_comment_on(issue),
                    self.bot_comments(issue),
                    self.fake
                        .comments_in(REPO)
                        .into_iter()
                        .filter(|c| c.issue != issue && [fake_github::APP_LOGIN, fake_github::ACTIONS_LOGIN].contains(&c.user.as_str()))
                        .map(|c| (c.issue, c.body.chars().take(400).collect::<String>()))
                        .collect::<Vec<_>>(),
                    self.fake
                        .runs(REPO)
                        .iter()
                        .map(|r| (&r.display_title, &r.status, &r.conclusion))
                        .collect::<Vec<_>>()
                );
            }
        }
    }

    /// The first `n` replies of the App on `issue`, once there are as many.
    pub async fn replies_after(&self, issue: i64, n: usize) -> Vec<String> {
        self.until_on(issue, "the replies", 30, |s| {
            s.bot_comments(issue).len() >= n
        })
        .await;
        self.bot_comments(issue)
    }

    /// Until the service has handled everything it was told, for stories
    /// that show that nothing (more) happens: every delivery the store took
    /// is done or given up — read from the store itself — and then GitHub
    /// was told nothing (no write; looks, as reconciliation's, may go on)
    /// for half a second. (An operation's effects may rightly wait — on a
    /// cap, on a review — so they are not waited for.)
    pub async fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let writes = |s: &Story| {
            s.fake
                .request_log()
                .iter()
                .filter(|(_, endpoint, _)| !endpoint.starts_with("GET "))
                .count()
        };
        loop {
            let deliveries = self.unfinished_deliveries();
            if deliveries == 0 {
                let told = writes(self);
                tokio::time::sleep(Duration::from_millis(500)).await;
                if self.unfinished_deliveries() == 0 && writes(self) == told {
                    return;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(
                Instant::now() < deadline,
                "the service did not settle: {} deliveries unfinished, GitHub still written to",
                self.unfinished_deliveries()
            );
        }
    }

    /// The store's file, when the story's store is SQLite.
    fn store_file(&self) -> Option<std::path::PathBuf> {
        let path = self.db_url.strip_prefix("sqlite://")?;
        Some(path.split('?').next()?.into())
    }

    /// A count the story's store answers (0 when it cannot be read yet).
    fn store_count(&self, sql: &str) -> i64 {
        let Some(file) = self.store_file() else {
            return 0;
        };
        rusqlite::Connection::open_with_flags(&file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.query_row(sql, [], |r| r.get(0)))
            .unwrap_or(0)
    }

    /// Deliveries a worker holds now, as the store says.
    pub fn deliveries_processing(&self) -> i64 {
        self.store_count("SELECT COUNT(*) FROM deliveries WHERE status = 'processing'")
    }

    fn unfinished_deliveries(&self) -> i64 {
        self.store_count(
            "SELECT COUNT(*) FROM deliveries WHERE status IN ('pending', 'processing')",
        )
    }

    pub fn final_pull(&self) -> Option<fake_github::Pull> {
        self.fake
            .pulls(REPO)
            .into_iter()
            .find(|p| p.base == "main" && p.head.ends_with("/integration"))
    }

    pub fn agent_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.tmp.path().join("agent.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// "<unit> <sprint>" of each agent run, in order.
    pub fn sprints_run(&self) -> Vec<String> {
        self.agent_log()
            .iter()
            .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect()
    }

    /// Dispatch ids per run: each must appear once.
    pub fn runs_per_dispatch(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in self.fake.runs(REPO) {
            *m.entry(r.display_title.clone()).or_insert(0) += 1;
        }
        m
    }

    /// One "Started operation" reply on the issue, however the start came in.
    pub fn assert_started_once(&self) {
        let started = self
            .bot_comments(self.issue)
            .into_iter()
            .filter(|c| c.starts_with("Started operation"))
            .count();
        assert_eq!(started, 1);
    }

    pub fn assert_no_double_dispatch(&self) {
        let twice: Vec<_> = self
            .runs_per_dispatch()
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect();
        assert!(twice.is_empty(), "dispatched twice: {twice:?}");
        let mut seen = std::collections::HashSet::new();
        for line in self.agent_log() {
            assert!(seen.insert(line.clone()), "an attempt ran twice: {line}");
        }
    }
}

impl Drop for Story {
    fn drop(&mut self) {
        match self.serving.take() {
            Some(Serving::Process(mut c)) => {
                let _ = c.kill();
                let _ = c.wait();
            }
            Some(Serving::InProcess { stop, task }) => {
                let _ = stop.send(());
                task.abort();
            }
            None => {}
        }
        if !std::thread::panicking() {
            replay_every_operation(&self.db_url);
        }
    }
}

/// Every operation the story's store logged, decided again by the engine
/// from each record's cause (`supervise replay`): the same events, or the
/// story fails with where they part.
fn replay_every_operation(db_url: &str) {
    let url = db_url.to_string();
    let differ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = supervise::store::sql::SqlStore::connect(&url)
                .await
                .unwrap();
            let mut differ = Vec::new();
            for op in store.logged_operations().await.unwrap() {
                let records = store.records(&op).await.unwrap();
                let (steps, _) = supervise::engine::replay::replay(&records, None);
                for s in steps {
                    match s.again {
                        supervise::engine::replay::Again::Same => {}
                        again => differ.push(format!("{op} #{}: {again:?}", s.seq)),
                    }
                }
            }
            differ
        })
    })
    .join()
    .unwrap();
    assert!(differ.is_empty(), "replay decided otherwise: {differ:#?}");
}

/// The agent of plan runs: one line of behaviour per sprint.
const SCRIPTED_AGENT: &str = "tests/agents/scripted.sh";
/// The agent of work without a plan: every role, by the unit's name.
const WORKFLOW_AGENT: &str = "examples/agents/workflow-agent.sh";

/// The agent workflow, in the shipped workflow's three jobs: the agent's
/// (read-only, holding the model's key) runs `agent`, reading its behaviour
/// from the story's file; the verifying job (no credential) and the
/// publishing job (the App's token) run the trusted binary.
fn set_agent_workflow(fake: &FakeGitHub, repo: &str, tmp: &Path, agent: &str) {
    set_agent_workflow_as(fake, repo, tmp, agent, &support::shipped_agent_workflow());
}

fn set_agent_workflow_as(fake: &FakeGitHub, repo: &str, tmp: &Path, agent: &str, yaml: &str) {
    set_agent_workflow_with(fake, repo, tmp, agent, yaml, &[]);
}

fn set_agent_workflow_with(
    fake: &FakeGitHub,
    repo: &str,
    tmp: &Path,
    agent: &str,
    yaml: &str,
    vars: &[(&str, String)],
) {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let agent_env: Vec<(String, String)> = [
        ("AGENT_LOG", tmp.join("agent.log").display().to_string()),
        (
            "AGENT_BEHAVIOUR",
            tmp.join("behaviour").display().to_string(),
        ),
        ("AGENT_SLOW", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    // The agent is the CLI's process itself, as a real CLI is: what it does
    // with a cancel is its own.
    let command = format!("exec sh {}", manifest.join(agent).display());
    let claude =
        fake_github::workflow::scripted_claude(&tmp.join("claude-code"), &command, &agent_env)
            .expect("the agent's command line");
    // A secret the agent's step holds, as a real agent's API key: a canary
    // that must never reach anything published.
    let mut planned = support::agent_workflow(yaml, &claude, &[("ANTHROPIC_API_KEY", CANARY_KEY)]);
    for (k, v) in vars {
        planned.setup_mut().vars.insert(k.to_string(), v.clone());
    }
    fake.set_workflow_yaml(repo, "supervise-agent.yml", planned);
}

/// The service's timings, shortened so a whole operation runs in seconds.
fn fast_timings(lease_secs: u64, reconcile_secs: u64) -> OpTimings {
    OpTimings {
        tick: Duration::from_millis(150),
        reconcile: Duration::from_secs(reconcile_secs),
        status_interval: Duration::from_millis(300),
        ci_grace: Duration::ZERO,
        force_cancel_after: Duration::from_secs(2),
        lease: Duration::from_secs(lease_secs),
    }
}

/// The same timings for the binary, as its environment.
pub fn fast_service(lease_secs: u64, reconcile_secs: u64) -> Vec<(&'static str, String)> {
    let t = fast_timings(lease_secs, reconcile_secs);
    vec![
        ("SUPERVISE_TICK_MS", t.tick.as_millis().to_string()),
        (
            "SUPERVISE_RECONCILE_SECS",
            t.reconcile.as_secs().to_string(),
        ),
        (
            "SUPERVISE_STATUS_INTERVAL_MS",
            t.status_interval.as_millis().to_string(),
        ),
        ("SUPERVISE_CI_GRACE_SECS", t.ci_grace.as_secs().to_string()),
        (
            "SUPERVISE_FORCE_CANCEL_SECS",
            t.force_cancel_after.as_secs().to_string(),
        ),
        ("SUPERVISE_LEASE_SECS", lease_secs.to_string()),
    ]
}

/// What `support::spawn_serve` gives the binary, for the service in process.
fn in_process_config(
    api: &str,
    db_url: &str,
    lease_secs: u64,
    reconcile_secs: u64,
) -> ServiceConfig {
    // One metrics recorder per process, as the binary has.
    static METRICS: OnceLock<Option<metrics_exporter_prometheus::PrometheusHandle>> =
        OnceLock::new();
    let metrics = METRICS
        .get_or_init(|| {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .ok()
        })
        .clone();
    let key = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pem"),
    )
    .unwrap();
    ServiceConfig {
        app_id: 42,
        private_key: SecretString::from(key),
        webhook_secrets: ["old-secret", SECRET]
            .into_iter()
            .map(|s| SecretString::from(s.to_string()))
            .collect(),
        api_url: api.to_string(),
        database_url: db_url.to_string(),
        bot_allow_list: Vec::new(),
        workers: 4,
        per_installation: 2,
        replica_id: "supervise-test".into(),
        timings: fast_timings(lease_secs, reconcile_secs),
        limits: Default::default(),
        metrics,
        delivery_retention: Some(supervise::store::sql::MIN_RETENTION),
        web: None,
        notifier: Default::default(),
    }
}
