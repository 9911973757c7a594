//! How the service's cost grows with work: the real `supervise serve`
//! binary against the fake GitHub, operations spread over installations of
//! ten repositories each (one operation per repository), each of ten units of
//! one sprint with `max_parallel: 4`. The fake's agent runs do no agent work:
//! each is in progress for a time drawn from a range and then leaves what the
//! agent workflow's jobs leave — the agent's commit, the trusted job's
//! results record on it with the check run that vouches for it, and green CI
//! (no checkout, no process) — so thousands can be in flight and the service
//! takes the production path: the record verified, the pull request opened
//! and merged, the next unit dispatched.
//!
//! For each scale it measures, in order:
//!
//! 1. **Idle** — every operation's four agents running and nothing
//!    finishing, for a window: charged GitHub requests per installation-hour
//!    by kind (the fake counts a 304 apart, as GitHub does not charge it),
//!    the service's CPU and resident memory, and the store's bytes per
//!    operation.
//! 2. **Churn** — the held runs end (spread over one run's time) and runs
//!    from then on last long enough for `BENCH_EVENTS_PER_SEC` webhooks a
//!    second (100; two a run); an operation that finishes is started anew on
//!    a new issue. The time from a run's `completed` webhook to the next
//!    dispatch of its operation (a run created), after a sixth of the window
//!    (at most 20 s), and the charged requests per completion.
//! 3. **Soak** (`BENCH_SOAK_SECS`, after the largest scale's churn) — the
//!    churn goes on; the service's memory every 30 s and its slope.
//!
//! And **two replicas** first (with `SUPERVISE_TEST_POSTGRES_URL` set, as
//! `scripts/test` sets it): `BENCH_REPLICA_SCALE` operations (100) on one
//! PostgreSQL database behind a balancer; how they split, and after one
//! replica is killed, how long until the other holds all its operations.
//!
//! Run: `cargo bench --bench scale`. `BENCH_SCALE=10,100,1000` operations;
//! `BENCH_WINDOW_SECS=120` the idle window; `BENCH_CHURN_SECS=60` the churn
//! window; `BENCH_RUN_MS=a-b` a churning run's duration instead of the one
//! `BENCH_EVENTS_PER_SEC` makes; `BENCH_SOAK_SECS=0`; `BENCH_HISTORY=100`
//! finished runs each repository has before its operation starts (a
//! repository in use has a full page of them, and the service reads it);
//! `BENCH_PERF_IDLE=f` / `BENCH_PERF_CHURN=f` a `perf record` of the service
//! in that window; `BENCH_SERVE_LOG` the service's log filter (with
//! `SERVE_LOG=1` to see it); `BENCH_DEBUG=1` the first repository's story.
//! The tables are printed at the end; the service's details go to stderr.

#[path = "support/process.rs"]
mod process;
#[path = "../tests/support/mod.rs"]
mod support;

use process::{env_or, usage};

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const UNITS: usize = 10;
const REPOS_PER_INSTALLATION: usize = 10;
const SETTINGS: &str = "max_parallel: 4\n";
const WORKFLOW: &str = "supervise-agent.yml";

/// Ten independent units of one sprint each.
fn plan() -> String {
    let mut p = String::from("# Scale\n\n| Work Unit | Directory |\n|---|---|\n");
    for u in 0..UNITS {
        p.push_str(&format!("| u{u} | u{u} |\n"));
    }
    for u in 0..UNITS {
        p.push_str(&format!(
            "\n## u{u}\n### Sprint 1: Part {u}\n- [ ] `u{u}/u{u}.txt` exists\n"
        ));
    }
    p
}

/// What an agent's run leaves when it succeeds, as the agent workflow's jobs
/// leave it: the agent's commit (the unit's file), then the trusted job's
/// results record on it — its criterion passed, the agent's commit listed,
/// the run's start named — with the record check that vouches for it and the
/// repository's CI, green. The service then takes the production path: the
/// record read and verified, the sprint's pull request opened and merged, the
/// next unit dispatched.
fn publisher() -> fake_github::SimulatedPublisher {
    use supervise::contract::{record_digest_line, results_path, short_id, RunResult};
    use supervise::engine::{CriterionOutcome, CriterionResult};
    let plan =
        supervise::plan::parse(&plan(), "EXECUTION_PLAN.md").expect("the bench's plan reads");
    let criteria: HashMap<String, (usize, String)> = plan
        .work_units
        .iter()
        .map(|u| {
            let c = &u.sprints[0].exit_criteria[0];
            (u.name.clone(), (c.line, c.text.clone()))
        })
        .collect();
    std::sync::Arc::new(move |run: &fake_github::Run| {
        let input = |k: &str| run.inputs[k].as_str().unwrap_or_default().to_string();
        let (dispatch, unit) = (input("dispatch_id"), input("unit"));
        let (line, text) = criteria.get(&unit)?.clone();
        let began_at = run.head_sha.clone();
        let changed = format!("{unit}/{unit}.txt");
        Some(fake_github::SimulatedWork {
            branch: input("branch"),
            agent_files: vec![(changed.clone(), format!("{dispatch}\n"))],
            agent_message: format!("Add {unit}.txt"),
            record: Box::new(move |agent: &str| {
                let record = RunResult {
                    exit_code: Some(0),
                    turns_used: Some(3),
                    output_tail: format!("Created {unit}.txt and committed it."),
                    criteria: vec![CriterionResult {
                        line,
                        text,
                        outcome: CriterionOutcome::Passed,
                        detail: String::new(),
                    }],
                    commits: Some(vec![short_id(agent)]),
                    began_at: Some(began_at),
                    changed: Some(vec![changed]),
                    ..Default::default()
                };
                let json = serde_json::to_string_pretty(&record).expect("a record serialises");
                let check = |name: &str, external_id: &str, summary: String, conclusion: &str| {
                    fake_github::SimulatedCheck {
                        name: name.into(),
                        external_id: external_id.into(),
                        summary,
                        conclusion: conclusion.into(),
                    }
                };
                fake_github::SimulatedRecord {
                    checks: vec![
                        check(
                            supervise::contract::RECORD_CHECK,
                            &dispatch,
                            record_digest_line(json.as_bytes()),
                            "neutral",
                        ),
                        check("ci", "", String::new(), "success"),
                    ],
                    files: vec![(results_path(&dispatch), json)],
                    message: format!("supervise: results of {dispatch}"),
                }
            }),
        })
    })
}

/// The operation a run belongs to, from its title (`supervise <op>/<unit>/…`).
fn op_of(title: &str) -> &str {
    title
        .trim_start_matches("supervise ")
        .split('/')
        .next()
        .unwrap_or(title)
}

/// What a request is for, by its route.
fn kind(endpoint: &str) -> &'static str {
    let (method, route) = endpoint.split_once(' ').unwrap_or(("", endpoint));
    if route.contains("/issues/comments/") && method == "PATCH" {
        "status edits"
    } else if method == "GET" {
        "reconciliation and reads"
    } else {
        "dispatch and lifecycle"
    }
}

/// Bytes of the SQLite store (with its write-ahead log).
fn store_bytes(db: &std::path::Path) -> u64 {
    ["", "-wal", "-shm"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
        .map(|m| m.len())
        .sum()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

struct Row {
    ops: usize,
    installations: usize,
    started_secs: f64,
    charged_per_inst_hour: f64,
    max_inst_hour: f64,
    by_kind: BTreeMap<&'static str, f64>,
    free_per_inst_hour: f64,
    rss_mb: u64,
    idle_cpu: f64,
    store_per_op: u64,
    churn_events_per_sec: f64,
    webhooks_per_sec: f64,
    charged_per_completion: f64,
    soak: Option<Soak>,
    reaction_p50: f64,
    reaction_p99: f64,
    churn_cpu: f64,
    churn_rss_mb: u64,
}

/// What the soak measured: the service's resident memory every 30 s.
struct Soak {
    secs: u64,
    samples: Vec<(f64, u64)>,
    operations_finished: usize,
}

impl Soak {
    /// The least-squares slope of the memory samples after the first third
    /// of the soak (caches fill at first), in MB an hour.
    fn slope_mb_per_hour(&self) -> f64 {
        let from = self.secs as f64 / 3.0;
        let pts: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|(t, _)| *t >= from)
            .map(|(t, b)| (*t, *b as f64 / 1e6))
            .collect();
        let n = pts.len() as f64;
        if n < 2.0 {
            return f64::NAN;
        }
        let (mx, my) = (
            pts.iter().map(|p| p.0).sum::<f64>() / n,
            pts.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let cov: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
        let var: f64 = pts.iter().map(|(x, _)| (x - mx).powi(2)).sum();
        cov / var * 3600.0
    }
}

/// `ops` repositories, ten to an installation, each with the plan, the
/// settings and a simulated agent workflow whose runs last `hold_ms`, after
/// `history` finished ones.
fn repositories(
    fake: &fake_github::FakeGitHub,
    ops: usize,
    hold_ms: u64,
    history: usize,
) -> Vec<String> {
    fake.set_rate_limit(100_000_000, Duration::from_secs(36_000));
    fake.add_user("mia", "maintain", "User");
    fake.set_simulated_publisher(publisher());
    let plan = plan();
    (0..ops)
        .map(|i| {
            let (inst, r) = (i / REPOS_PER_INSTALLATION, i % REPOS_PER_INSTALLATION);
            let owner = format!("org{inst:03}");
            fake.set_installation(&owner, 1_000 + inst as u64);
            let repo = format!("{owner}/repo{r}");
            fake.ensure_repo(&repo);
            fake.add_file(&repo, "EXECUTION_PLAN.md", &plan);
            fake.add_file(&repo, ".github/supervise.yml", SETTINGS);
            fake.set_simulated_workflow(&repo, WORKFLOW, hold_ms, hold_ms);
            fake.add_finished_runs(&repo, WORKFLOW, history);
            repo
        })
        .collect()
}

/// Says `/supervise start` on an issue of every repository, then waits until
/// every operation's four agents are in progress; how long that took.
async fn start_all(fake: &fake_github::FakeGitHub, repos: &[String]) -> f64 {
    let began = Instant::now();
    for repo in repos {
        let issue = fake.open_issue(repo, "Operation");
        fake.comment(repo, issue, "mia", "/supervise start", false)
            .await;
    }
    let limit = Duration::from_secs(120 + repos.len() as u64);
    loop {
        let running: usize = repos
            .iter()
            .map(|r| {
                fake.runs(r)
                    .iter()
                    .filter(|x| x.status == "in_progress")
                    .count()
            })
            .sum();
        if running >= 4 * repos.len() {
            return began.elapsed().as_secs_f64();
        }
        assert!(
            began.elapsed() < limit,
            "{running} of {} runs started in {limit:?}",
            4 * repos.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A new operation (`/supervise start` on a new issue) in each repository
/// whose operation finished since the last look (its final pull request is
/// open), so operations keep finishing and starting; `finished` counts them
/// by repository. How many started.
async fn restart_finished(
    fake: &fake_github::FakeGitHub,
    repos: &[String],
    finished: &mut HashMap<String, usize>,
) -> usize {
    let mut started = 0;
    let finals = fake.count_pulls(|p| p.title.starts_with("Sprint Supervisor:"));
    for repo in repos {
        let done = finals.get(repo).copied().unwrap_or(0);
        let seen = finished.entry(repo.clone()).or_default();
        if done > *seen {
            *seen = done;
            let issue = fake.open_issue(repo, "Operation");
            fake.comment(repo, issue, "mia", "/supervise start", false)
                .await;
            started += 1;
        }
    }
    started
}

/// `perf record` of the service for `span`, into the file the environment
/// variable `var` names (none without it): where a missed target's time goes.
fn profile(var: &str, pid: u32, span: Duration) -> Option<std::process::Child> {
    let out = std::env::var(var).ok()?;
    std::process::Command::new("perf")
        .args([
            "record",
            "-F",
            "199",
            "-g",
            "-o",
            &out,
            "-p",
            &pid.to_string(),
            "--",
        ])
        .args(["sleep", &span.as_secs().to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

/// The lines of `text` that begin with one of `prefixes`.
fn lines_starting<'a>(text: &'a str, prefixes: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .collect()
}

/// heaptrack attached to the service for the soak, into the file the
/// environment variable `var` names (none without it): what the heap keeps
/// that it did not keep before. Needs a bench built with the
/// `system-allocator` feature (heaptrack watches malloc, not mimalloc).
fn heap_profile(var: &str, pid: u32) -> Option<std::process::Child> {
    let out = std::env::var(var).ok()?;
    std::process::Command::new("heaptrack")
        .args(["-o", &out, "-p", &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()
}

fn finish(perf: Option<std::process::Child>) {
    if let Some(mut p) = perf {
        let _ = p.wait();
    }
}

/// Reaction times (sorted) to the runs completed from `from` until `to` (the
/// fake's clock), and how many completed then: each run created in an operation answers
/// the earliest of its completions before it not yet answered.
fn reactions(
    fake: &fake_github::FakeGitHub,
    repos: &[String],
    from: f64,
    to: f64,
) -> (Vec<f64>, usize) {
    let runs: Vec<fake_github::Run> = repos.iter().flat_map(|r| fake.runs(r)).collect();
    let mut created: HashMap<&str, Vec<f64>> = HashMap::new();
    for r in &runs {
        created
            .entry(op_of(&r.display_title))
            .or_default()
            .push(r.created);
    }
    let mut completed: HashMap<&str, Vec<f64>> = HashMap::new();
    let deliveries = fake.run_deliveries();
    for (at, action, title) in &deliveries {
        if action == "completed" {
            completed.entry(op_of(title)).or_default().push(*at);
        }
    }
    let mut out = Vec::new();
    let mut counted = 0;
    for (op, ends) in completed {
        counted += ends.iter().filter(|at| **at >= from && **at < to).count();
        // Both kinds of moment in time order; a completion before a run
        // created at the same instant.
        let mut moments: Vec<(f64, bool)> = ends.into_iter().map(|at| (at, true)).collect();
        moments.extend(
            created
                .remove(op)
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c, false)),
        );
        moments.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut waiting = std::collections::VecDeque::new();
        for (at, is_end) in moments {
            if is_end {
                waiting.push_back(at);
            } else if let Some(end) = waiting.pop_front() {
                if end >= from && end < to {
                    out.push(at - end);
                }
            }
        }
    }
    out.sort_by(f64::total_cmp);
    (out, counted)
}

/// Dispatches made twice: runs carrying the same dispatch id.
fn doubled(fake: &fake_github::FakeGitHub, repos: &[String]) -> usize {
    let mut seen = std::collections::HashSet::new();
    repos
        .iter()
        .flat_map(|r| fake.runs(r))
        .filter(|r| !seen.insert(r.display_title.clone()))
        .count()
}

async fn one(
    ops: usize,
    window: Duration,
    churn: Duration,
    soak: Duration,
    run_ms: (u64, u64),
) -> Row {
    let tmp = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let fake = support::fake_github(Some(port), Some(tmp.path().join("github"))).await;
    let installations = ops.div_ceil(REPOS_PER_INSTALLATION);
    let hold_ms = (window + Duration::from_secs(3_600)).as_millis() as u64;
    let repos = repositories(&fake, ops, hold_ms, env_or("BENCH_HISTORY", 100));
    let db = tmp.path().join("supervise.db");
    let db_url = format!("sqlite://{}?mode=rwc", db.display());
    // Every agent in flight at once: the installation's default cap would
    // hold the rest.
    let mut serve = support::spawn_serve(
        port,
        &fake.url(),
        &db_url,
        &[
            ("SUPERVISE_INSTALLATION_AGENTS", "100000".to_string()),
            (
                "SUPERVISE_LOG",
                env_or("BENCH_SERVE_LOG", "info".to_string()),
            ),
        ],
    );
    support::wait_listening(port).await;
    let started_secs = start_all(&fake, &repos).await;
    // The dispatches' own requests (branches, sub-issues, status edits) settle.
    tokio::time::sleep(Duration::from_secs(20)).await;

    // 1. Idle.
    let inst_ids: Vec<u64> = (0..installations).map(|i| 1_000 + i as u64).collect();
    let used = |f: &fake_github::FakeGitHub| -> Vec<u64> {
        inst_ids
            .iter()
            .map(|i| 100_000_000 - f.rate_limit_remaining(*i))
            .collect()
    };
    let used0 = used(&fake);
    let (counts0, free0) = (fake.counts(), fake.not_modified());
    let (cpu0, _) = usage(serve.id());
    let t0 = Instant::now();
    let perf = profile("BENCH_PERF_IDLE", serve.id(), window);
    tokio::time::sleep(window).await;
    finish(perf);
    let (cpu1, rss) = usage(serve.id());
    let secs = t0.elapsed().as_secs_f64();
    let used1 = used(&fake);
    let per_inst_hour = |n: f64| n * 3600.0 / secs / installations as f64;
    let spent: Vec<u64> = used1.iter().zip(&used0).map(|(a, b)| a - b).collect();
    let mut by_kind: BTreeMap<&'static str, f64> = BTreeMap::new();
    let mut free = 0;
    let (counts1, free1) = (fake.counts(), fake.not_modified());
    for (endpoint, n) in &counts1 {
        if endpoint.contains("access_tokens") {
            continue;
        }
        let f =
            free1.get(endpoint).copied().unwrap_or(0) - free0.get(endpoint).copied().unwrap_or(0);
        let charged = n - counts0.get(endpoint).copied().unwrap_or(0) - f;
        free += f;
        *by_kind.entry(kind(endpoint)).or_default() += per_inst_hour(charged as f64);
    }
    eprintln!(
        "{ops} operations, idle {secs:.0} s: by endpoint (all, then 304) {:#?}",
        counts1
            .iter()
            .map(|(k, n)| (k.clone(), n - counts0.get(k).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect::<BTreeMap<_, _>>()
    );
    let store_per_op = store_bytes(&db) / ops as u64;

    // 2. Churn: runs from now on last `run_ms`; the held ones end over one
    // such run's time, so the churn is steady from the start.
    for repo in &repos {
        fake.set_simulated_workflow(repo, WORKFLOW, run_ms.0, run_ms.1);
    }
    let churn_from = fake.now();
    fake.end_simulated_runs(Duration::from_millis((run_ms.0 + run_ms.1) / 2));
    let (cpu2, _) = usage(serve.id());
    let charged0 = fake.charged();
    let t1 = Instant::now();
    let perf = profile("BENCH_PERF_CHURN", serve.id(), churn);
    let mut finished = HashMap::new();
    while t1.elapsed() < churn {
        tokio::time::sleep(Duration::from_secs(1)).await;
        restart_finished(&fake, &repos, &mut finished).await;
    }
    finish(perf);
    let (cpu3, churn_rss) = usage(serve.id());
    let churn_secs = t1.elapsed().as_secs_f64();
    let churn_to = fake.now();
    let charged_by: BTreeMap<String, u64> = fake
        .charged()
        .iter()
        .filter(|(k, _)| !k.contains("access_tokens"))
        .map(|(k, n)| (k.clone(), n - charged0.get(k).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    eprintln!("{ops} operations, churn {churn_secs:.0} s: charged by endpoint {charged_by:#?}");
    let charged: u64 = charged_by.values().sum();
    // Each completion followed by a dispatch of the same operation (a run
    // created for it): how long the service took to react. Each run created
    // is the reaction to the earliest completion of its operation before it
    // not yet answered (the last units' completions have none).
    let steady_from = churn_from + (churn.as_secs_f64() / 6.0).min(20.0);
    let (reactions, completions) = reactions(&fake, &repos, steady_from, churn_to);
    let webhooks = fake
        .run_deliveries()
        .iter()
        .filter(|(at, _, _)| *at >= steady_from && *at < churn_to)
        .count();
    let all_completions = fake
        .run_deliveries()
        .iter()
        .filter(|(at, a, _)| a == "completed" && *at >= churn_from && *at < churn_to)
        .count();
    // Where a delivery's time went in the churn's last minute (the
    // service's summaries): waiting, by stage, and working, by event.
    let (_, metrics) = support::get(port, "/metrics").await;
    for l in metrics.lines().filter(|l| {
        (l.starts_with("supervise_delivery_wait_seconds{")
            || l.starts_with("supervise_processing_seconds{"))
            && (l.contains("quantile=\"0.5\"")
                || l.contains("quantile=\"0.99\"")
                || l.contains("quantile=\"1\""))
    }) {
        eprintln!("{ops} operations, churn: {l}");
    }
    // 3. The soak: the churn goes on, operations finishing and starting;
    // the service's memory every 30 s.
    let mut rss_samples = Vec::new();
    let heaptrack = (!soak.is_zero())
        .then(|| heap_profile("BENCH_HEAPTRACK", serve.id()))
        .flatten();
    let t2 = Instant::now();
    // Operations started anew in the busiest second since the last sample:
    // whether they finish and start in waves.
    let mut most_started = 0;
    while t2.elapsed() < soak {
        tokio::time::sleep(Duration::from_secs(1)).await;
        most_started = most_started.max(restart_finished(&fake, &repos, &mut finished).await);
        if rss_samples.len() as u64 <= t2.elapsed().as_secs() / 30 {
            rss_samples.push((t2.elapsed().as_secs_f64(), usage(serve.id()).1));
            // What the service says it holds, beside what it takes: where
            // a growth is, or is not.
            let (_, metrics) = support::get(port, "/metrics").await;
            let held = lines_starting(
                &metrics,
                &[
                    "supervise_github_etag_cache_bytes",
                    "supervise_operations_loaded",
                    "supervise_tasks_alive",
                ],
            );
            // Anonymous memory (the heap) apart from mapped files
            // (SQLite's shared memory, the binary).
            let status =
                std::fs::read_to_string(format!("/proc/{}/status", serve.id())).unwrap_or_default();
            let kinds = lines_starting(&status, &["RssAnon", "RssFile", "RssShmem"]);
            eprintln!(
                "soak {:.0} s: {held:?} {kinds:?}, at most {most_started} operations started in one second",
                t2.elapsed().as_secs_f64()
            );
            most_started = 0;
        }
    }
    let operations_finished: usize = finished.values().sum();
    if std::env::var("BENCH_DEBUG").is_ok() {
        for c in fake.comments(&repos[0], 1) {
            eprintln!("--- comment\n{}", c.body);
        }
        for (at, what, status) in fake.request_log() {
            if at >= churn_from + 40.0 && at < churn_from + 50.0 {
                eprintln!("{at:.3} {what} {status}");
            }
        }
        for (at, action, title) in fake.run_deliveries() {
            eprintln!("{at:.3} delivered {action} {title}");
        }
        for r in fake.runs(&repos[0]) {
            eprintln!(
                "run {} {} {:?} {}",
                r.display_title, r.status, r.conclusion, r.created
            );
        }
    }
    assert_eq!(doubled(&fake, &repos), 0, "a dispatch made twice");
    if let Some(mut h) = heaptrack {
        // The profile's last allocations are written as the service ends.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &serve.id().to_string()])
            .status();
        let _ = serve.wait();
        let _ = h.wait();
    }
    let _ = serve.kill();
    let _ = serve.wait();
    Row {
        ops,
        installations,
        started_secs,
        charged_per_inst_hour: per_inst_hour(spent.iter().sum::<u64>() as f64),
        max_inst_hour: spent.iter().copied().max().unwrap_or(0) as f64 * 3600.0 / secs,
        by_kind,
        free_per_inst_hour: per_inst_hour(free as f64),
        rss_mb: rss / 1_000_000,
        idle_cpu: (cpu1 - cpu0).as_secs_f64() * 100.0 / secs,
        store_per_op,
        churn_events_per_sec: completions as f64 / (churn_to - steady_from),
        webhooks_per_sec: webhooks as f64 / (churn_to - steady_from),
        charged_per_completion: charged as f64 / all_completions.max(1) as f64,
        soak: (!soak.is_zero()).then_some(Soak {
            secs: soak.as_secs(),
            samples: rss_samples,
            operations_finished,
        }),
        reaction_p50: percentile(&reactions, 0.50),
        reaction_p99: percentile(&reactions, 0.99),
        churn_cpu: (cpu3 - cpu2).as_secs_f64() * 100.0 / churn_secs,
        churn_rss_mb: churn_rss / 1_000_000,
    }
}

/// Two replicas on one PostgreSQL database behind a balancer, at the
/// service's default lease (120 s): how the operations split between them,
/// then, with runs churning, one replica SIGKILLed and the time until the
/// other holds every operation it held; dispatches made twice, if any.
async fn replicas(ops: usize, run_ms: (u64, u64)) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let fake = support::fake_github(Some(port), Some(tmp.path().join("github"))).await;
    let repos = repositories(&fake, ops, 3_600_000, 0);
    let db = support::postgres_database().await;
    let env = |id: &str| {
        vec![
            ("SUPERVISE_INSTALLATION_AGENTS", "100000".to_string()),
            ("SUPERVISE_REPLICA_ID", id.to_string()),
        ]
    };
    let (p1, p2) = (support::free_port(), support::free_port());
    let mut r1 = support::spawn_serve(p1, &fake.url(), &db, &env("replica-1"));
    let mut r2 = support::spawn_serve(p2, &fake.url(), &db, &env("replica-2"));
    support::wait_listening(p1).await;
    support::wait_listening(p2).await;
    drop(support::balance(port, vec![p1, p2]));
    support::wait_listening(port).await;
    let started = start_all(&fake, &repos).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let pool = sqlx::AnyPool::connect(&db).await.unwrap();
    let owners = |pool: sqlx::AnyPool| async move {
        let rows: Vec<(Option<String>, i64)> = sqlx::query_as(
            "SELECT owner, COUNT(*) FROM operations WHERE active = 1 GROUP BY owner ORDER BY owner",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        rows.into_iter()
            .map(|(o, n)| (o.unwrap_or_else(|| "none".into()), n))
            .collect::<BTreeMap<String, i64>>()
    };
    let split = owners(pool.clone()).await;
    // Runs churn; one replica dies without warning.
    for repo in &repos {
        fake.set_simulated_workflow(repo, WORKFLOW, run_ms.0, run_ms.1);
    }
    fake.end_simulated_runs(Duration::from_millis((run_ms.0 + run_ms.1) / 2));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let held_by_1 = owners(pool.clone())
        .await
        .get("replica-1")
        .copied()
        .unwrap_or(0);
    let _ = r1.kill();
    let _ = r1.wait();
    let killed = Instant::now();
    let takeover = loop {
        let now = owners(pool.clone()).await;
        if now.get("replica-1").copied().unwrap_or(0) == 0 {
            break killed.elapsed().as_secs_f64();
        }
        if killed.elapsed() > Duration::from_secs(600) {
            break f64::INFINITY;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    tokio::time::sleep(Duration::from_secs(20)).await;
    let twice = doubled(&fake, &repos);
    // The service's tables with their indexes and TOAST, not the empty
    // database's own catalogues.
    let (bytes,): (i64,) = sqlx::query_as("SELECT CAST(COALESCE(SUM(pg_total_relation_size(c.oid)), 0) AS BIGINT) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let _ = r2.kill();
    let _ = r2.wait();
    let shares: Vec<String> = split.iter().map(|(o, n)| format!("{o} {n}")).collect();
    format!(
        "| {ops} | {started:.0} s | {} | {held_by_1} | {takeover:.1} s | {twice} | {} KB |",
        shares.join(", "),
        bytes / ops as i64 / 1024
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let scales: Vec<usize> = std::env::var("BENCH_SCALE")
        .unwrap_or_else(|_| "10,100,1000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let window = Duration::from_secs(env_or("BENCH_WINDOW_SECS", 120));
    let churn = Duration::from_secs(env_or("BENCH_CHURN_SECS", 60));
    let soak = Duration::from_secs(env_or("BENCH_SOAK_SECS", 0));
    let events: u64 = env_or("BENCH_EVENTS_PER_SEC", 100);
    // A run's duration, in ms: as given, or what makes `events` webhooks a
    // second (two a run) with four agents in flight per operation.
    let run_ms = |ops: usize| -> (u64, u64) {
        std::env::var("BENCH_RUN_MS")
            .ok()
            .and_then(|v| {
                let (a, b) = v.split_once('-')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            })
            .unwrap_or_else(|| {
                let mean = 4 * ops as u64 * 2 * 1_000 / events.max(1);
                (mean / 2, mean * 3 / 2)
            })
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Two replicas on PostgreSQL (SUPERVISE_TEST_POSTGRES_URL, a server
    // whose databases the bench may create), at BENCH_REPLICA_SCALE.
    if std::env::var("SUPERVISE_TEST_POSTGRES_URL").is_ok_and(|u| !u.is_empty()) {
        let ops = env_or("BENCH_REPLICA_SCALE", 100usize);
        let row = rt.block_on(replicas(ops, run_ms(ops)));
        println!("| operations | all started in | active operations by replica | held by the replica killed | until the other held them all (lease 120 s) | dispatches made twice | database per operation |");
        println!("|---|---|---|---|---|---|---|");
        println!("{row}");
    }
    let mut rows = Vec::new();
    let last = scales.last().copied();
    for ops in scales {
        // The soak follows the largest scale's churn.
        let soak = if Some(ops) == last {
            soak
        } else {
            Duration::ZERO
        };
        let row = rt.block_on(one(ops, window, churn, soak, run_ms(ops)));
        eprintln!("done: {ops} operations");
        rows.push(row);
    }
    if rows.is_empty() {
        return;
    }
    println!("| operations (installations) | all started in | idle: charged requests per installation-hour (busiest) | of which dispatch and lifecycle / status edits / reconciliation and reads | answered 304 per installation-hour | RSS idle | CPU idle | store per operation | churn: webhooks per s (completions) | charged requests per completion | reaction p50 / p99 | CPU, RSS in churn |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let k = |name: &str| r.by_kind.get(name).copied().unwrap_or(0.0);
        println!(
            "| {} ({}) | {:.0} s | {:.0} ({:.0}) | {:.0} / {:.0} / {:.0} | {:.0} | {} MB | {:.1} % | {} KB | {:.0} ({:.0}) | {:.1} | {:.2} s / {:.2} s | {:.0} %, {} MB |",
            r.ops,
            r.installations,
            r.started_secs,
            r.charged_per_inst_hour,
            r.max_inst_hour,
            k("dispatch and lifecycle"),
            k("status edits"),
            k("reconciliation and reads"),
            r.free_per_inst_hour,
            r.rss_mb,
            r.idle_cpu,
            r.store_per_op / 1024,
            r.webhooks_per_sec,
            r.churn_events_per_sec,
            r.charged_per_completion,
            r.reaction_p50,
            r.reaction_p99,
            r.churn_cpu,
            r.churn_rss_mb,
        );
    }
    for r in &rows {
        if let Some(soak) = &r.soak {
            let mb = |b: u64| b / 1_000_000;
            let (first, peak, end) = (
                soak.samples.first().map_or(0, |s| s.1),
                soak.samples.iter().map(|s| s.1).max().unwrap_or(0),
                soak.samples.last().map_or(0, |s| s.1),
            );
            println!();
            println!("| soak at {} operations | operations finished and started anew | RSS at its start / peak / end | slope after the first third |", r.ops);
            println!("|---|---|---|---|");
            println!(
                "| {} min | {} | {} / {} / {} MB | {:+.1} MB an hour |",
                soak.secs / 60,
                soak.operations_finished,
                mb(first),
                mb(peak),
                mb(end),
                soak.slope_mb_per_hour()
            );
            eprintln!("soak samples (s, bytes): {:?}", soak.samples);
        }
    }
}
