//! What operations in flight cost an installation of GitHub's rate limit
//! (5,000 requests an hour), and the service of memory and CPU, while nothing
//! happens: the real `supervise serve` binary at its default settings against
//! the fake GitHub (which answers conditional requests and counts a 304 as
//! free, as GitHub does), N operations of one installation, each of four
//! units of one sprint with `max_parallel: 4`, every agent run kept in
//! progress. After the dispatches settle, a window (180 s by default) is
//! counted and scaled to an hour.
//!
//! Run: `cargo bench --bench reconcile_cost`. `BENCH_OPS=1,10,30` the
//! operations in flight per run (per installation); `BENCH_WINDOW_SECS=180`.

#[path = "support/process.rs"]
mod process;
#[path = "../tests/support/mod.rs"]
mod support;

use process::{env_or, usage};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const REPO: &str = "acme/shop";
const PLAN: &str = "# Four\n\n| Work Unit | Directory |\n|---|---|\n| a | a |\n| b | b |\n| c | c |\n| d | d |\n\n\
## a\n### Sprint 1: A\n- [ ] `a.txt` exists\n## b\n### Sprint 1: B\n- [ ] `b.txt` exists\n\
## c\n### Sprint 1: C\n- [ ] `c.txt` exists\n## d\n### Sprint 1: D\n- [ ] `d.txt` exists\n";
const SETTINGS: &str = "max_parallel: 4\n";

async fn one(ops: usize, window: Duration) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let fake = support::fake_github(Some(port), Some(tmp.path().join("github"))).await;
    fake.ensure_repo(REPO);
    fake.add_user("mia", "maintain", "User");
    fake.add_file(REPO, "EXECUTION_PLAN.md", PLAN);
    fake.add_file(REPO, ".github/supervise.yml", SETTINGS);
    let hold = window.as_secs() + 300;
    fake.set_workflow(REPO, "supervise-agent.yml", &format!("sleep {hold}"), &[]);
    let db = format!(
        "sqlite://{}?mode=rwc",
        tmp.path().join("supervise.db").display()
    );
    // Every agent in flight at once: the installation's default cap of 20
    // would hold the rest (and their runs would never be in progress).
    let mut serve = support::spawn_serve(
        port,
        &fake.url(),
        &db,
        &[("SUPERVISE_INSTALLATION_AGENTS", "100000".to_string())],
    );
    support::wait_listening(port).await;
    let issues: Vec<i64> = (0..ops)
        .map(|i| fake.open_issue(REPO, &format!("Operation {i}")))
        .collect();
    for issue in &issues {
        fake.comment(REPO, *issue, "mia", "/supervise start", false)
            .await;
    }
    let started = Instant::now();
    while fake
        .runs(REPO)
        .iter()
        .filter(|r| r.status == "in_progress")
        .count()
        < 4 * ops
    {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the runs never all started"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The dispatches' own requests (branches, status edits) settle first.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let from = fake.request_log().last().map(|(t, _, _)| *t).unwrap_or(0.0);
    let (cpu0, _) = usage(serve.id());
    let t0 = Instant::now();
    tokio::time::sleep(window).await;
    let (cpu1, rss) = usage(serve.id());
    let secs = t0.elapsed().as_secs_f64();
    let mut by: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (t, e, st) in fake.request_log() {
        if t <= from || e.contains("access_tokens") {
            continue;
        }
        let slot = by.entry(e).or_default();
        match st {
            304 => slot.1 += 1,
            _ => slot.0 += 1,
        }
    }
    let per_hour = |n: u64| n as f64 * 3600.0 / secs;
    let charged: u64 = by.values().map(|(c, _)| c).sum();
    let free: u64 = by.values().map(|(_, f)| f).sum();
    let single = by
        .get("GET /repos/{o}/{r}/actions/runs/{id}")
        .map_or(0, |(c, f)| c + f);
    eprintln!("{ops} operation(s): requests in {secs:.0} s (charged, 304): {by:#?}");
    let _ = serve.kill();
    let _ = serve.wait();
    // The held runs' sleeps end with the fake's data directory.
    let _ = std::process::Command::new("pkill")
        .args(["-f", &format!("sleep {hold}")])
        .status();
    format!(
        "| {ops} | {} | {} | {:.0} | {:.0} | {} MB | {:.1} % |",
        ops * 4,
        per_hour(charged).round(),
        per_hour(free),
        per_hour(single),
        rss / 1_000_000,
        (cpu1 - cpu0).as_secs_f64() * 100.0 / secs,
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let counts: Vec<usize> = std::env::var("BENCH_OPS")
        .unwrap_or_else(|_| "1,10,30".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let window = Duration::from_secs(env_or("BENCH_WINDOW_SECS", 180));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    for ops in counts {
        rows.push(rt.block_on(one(ops, window)));
    }
    println!("| operations in flight (one installation) | agents in flight | charged requests per installation-hour | answered 304 per hour | single-run reads per hour | service RSS | service CPU |");
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}
