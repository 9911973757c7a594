//! What the service spends of GitHub's rate limit, of its own memory and of
//! the operator's money, while operations are in flight and after they end:
//! the service in this
//! process against the fake GitHub, which answers conditional requests and
//! keeps an installation's rate limit as GitHub does (`fake-github/src/quota.rs`).
//! Figures per hour at the service's default settings are measured by
//! `cargo bench --bench reconcile_cost`; these stories hold the shape.

mod story;
mod support;

use std::time::Duration;
use story::{Setup, Story, REPO};
use supervise::place::hosted::InstallationLimits;
use support::get;

/// Four units of one sprint each, all in the first layer.
const FOUR: &str = "# Four\n\n| Work Unit | Directory |\n|---|---|\n| a | a |\n| b | b |\n| c | c |\n| d | d |\n\n\
## a\n### Sprint 1: A\n- [ ] `a/a-sprint-1.txt` exists\n\
## b\n### Sprint 1: B\n- [ ] `b/b-sprint-1.txt` exists\n\
## c\n### Sprint 1: C\n- [ ] `c/c-sprint-1.txt` exists\n\
## d\n### Sprint 1: D\n- [ ] `d/d-sprint-1.txt` exists\n";

const ONE: &str = "# One\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n\
## solo\n### Sprint 1: Solo\n- [ ] `solo/solo-sprint-1.txt` exists\n";

const SETTINGS: &str = "max_parallel: 4\nmodels:\n  haiku: claude-haiku\n  sonnet: claude-sonnet\n  opus: claude-opus\n";

/// Every agent of the story hangs: runs stay in progress.
const HANG: &str = "a 1 hang\nb 1 hang\nc 1 hang\nd 1 hang\nsolo 1 hang\n";

const RUN_LIST: &str = "GET /repos/{o}/{r}/actions/workflows/{file}/runs";
const RUN_READ: &str = "GET /repos/{o}/{r}/actions/runs/{id}";

/// Requests in the log from `from` (seconds on the fake's clock) on, per
/// endpoint: (charged, answered 304).
fn since(s: &Story, from: f64) -> std::collections::BTreeMap<String, (u64, u64)> {
    let mut by = std::collections::BTreeMap::new();
    for (t, e, st) in s.fake.request_log() {
        if t < from {
            continue;
        }
        let slot: &mut (u64, u64) = by.entry(e).or_default();
        match st {
            304 => slot.1 += 1,
            _ => slot.0 += 1,
        }
    }
    by
}

fn now_on_fake(s: &Story) -> f64 {
    s.fake
        .request_log()
        .last()
        .map(|(t, _, _)| *t)
        .unwrap_or_default()
}

/// Waits (at most `secs`) until the service has made no charged request for
/// `for_secs` on the fake's clock.
async fn quiet(s: &Story, for_secs: f64, secs: u64) {
    let start = std::time::Instant::now();
    loop {
        let log = s.fake.request_log();
        let now = s.fake.now();
        let last_charged = log
            .iter()
            .rev()
            .find(|(_, _, st)| *st != 304)
            .map(|(t, _, _)| *t)
            .unwrap_or_default();
        if now - last_charged >= for_secs || start.elapsed().as_secs() >= secs {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for `n` runs in progress. The bound is generous: on a loaded CI
/// machine the first operation alone has taken 28 s to start, and three
/// operations dispatch nine runs one after another.
async fn in_progress(s: &Story, n: usize) {
    s.until("the runs in progress", 180, |s| {
        s.fake
            .runs(REPO)
            .iter()
            .filter(|r| r.status == "in_progress")
            .count()
            >= n
    })
    .await;
}

/// Two operations of four agents and one of a single agent, all hanging:
/// reconciling them reads no run on its own, and one conditional look per
/// operation at the workflow's runs answers for all of them — 304, free,
/// while none changed. So the charged cost per operation-hour does not grow
/// with its agents (it grew by 120 reads an hour per agent before).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconciling_runs_in_flight_reads_one_free_list_per_operation_whatever_its_agents() {
    let s = Story::start(Setup::operation(FOUR, HANG)).await;
    s.fake.add_file(REPO, ".github/supervise.yml", SETTINGS);
    s.fake.add_file(REPO, "ONE.md", ONE);
    let second = s.fake.open_issue(REPO, "Four more");
    let third = s.fake.open_issue(REPO, "Just one");
    s.say("/supervise start").await;
    s.say_on(second, "/supervise start").await;
    s.say_on(third, "/supervise start ONE.md").await;
    in_progress(&s, 9).await;
    // Each operation's first status comment is made once (a look for it,
    // a post, and a read of the runs for its links): on a loaded machine
    // that can come after the runs started, so the window opens only when
    // all three are there.
    for issue in [s.issue, second, third] {
        s.until_on(issue, "the status comment", 60, |s| {
            !s.status_comment_on(issue).is_empty()
        })
        .await;
    }
    // Let the dispatches' own reads and edits pass (on a loaded machine they
    // take longer than the runs to start): until nothing charged for 2 s,
    // then watch for several reconciliation periods (1 s at the start,
    // longer as the runs age).
    quiet(&s, 2.0, 30).await;
    // Watch for at least 8 s, and on until three looks at the runs (each is
    // a quarter of the youngest run's age apart, so a loaded machine, where
    // the wait above took longer, spaces them more), at most 40 s.
    let from = now_on_fake(&s);
    let started = std::time::Instant::now();
    let window = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let w = since(&s, from);
        let (c, f) = w.get(RUN_LIST).copied().unwrap_or_default();
        let waited = started.elapsed();
        if (waited >= Duration::from_secs(8) && c + f >= 3) || waited >= Duration::from_secs(40) {
            break w;
        }
    };
    eprintln!("requests in the window (charged, 304): {window:#?}");
    let (list_charged, list_free) = window.get(RUN_LIST).copied().unwrap_or_default();
    assert_eq!(
        window.get(RUN_READ),
        None,
        "no run is read on its own while it is on the list"
    );
    assert!(
        list_charged + list_free >= 3,
        "each operation looked at the runs ({list_charged} + {list_free})"
    );
    assert!(
        list_charged <= 1,
        "the list changed at most once in the window, so at most one look is charged: {list_charged}"
    );
    let charged: u64 = window.values().map(|(c, _)| c).sum();
    assert!(
        charged <= 3,
        "nothing else is charged while nothing happens: {window:#?}"
    );
    assert_eq!(s.fake.refused_for_rate(), 0);
    for issue in [s.issue, second, third] {
        s.say_on(issue, "/supervise killall").await;
    }
}

/// With a tenth of the installation's window left, the service slows what
/// can wait before GitHub has to refuse anything: no look at the runs for
/// many base periods, status edits a minute apart, the status comment and
/// `/metrics` say so; and a finished run's webhook still moves the operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn near_the_rate_limit_the_service_slows_itself_and_says_so() {
    let s = Story::start(Setup::operation(ONE, "solo 1 hang")).await;
    s.fake.set_rate_limit(1000, Duration::from_secs(3600));
    s.say("/supervise start").await;
    in_progress(&s, 1).await;
    s.until("the status comment shows the run", 30, |s| {
        s.status_comment().contains("solo")
    })
    .await;
    assert!(!s.status_comment().contains("rate limit"));
    // Another App's work spends the window down to 60 of 1,000.
    s.fake.use_rate_limit(7, 940);
    s.until("the status comment says it slows", 30, |s| {
        s.status_comment().contains("near GitHub's rate limit")
    })
    .await;
    let (_, metrics) = get(s.port, "/metrics").await;
    assert!(
        metrics.contains("supervise_github_slowed{installation=\"7\"} 1"),
        "{metrics}"
    );
    let from = now_on_fake(&s);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let window = since(&s, from);
    assert_eq!(
        window.get(RUN_LIST).map(|(c, f)| c + f).unwrap_or(0),
        0,
        "no look at the runs for six base periods: {window:#?}"
    );
    assert_eq!(s.fake.refused_for_rate(), 0, "GitHub never had to refuse");
    let remaining = s.fake.rate_limit_remaining(7);
    assert!(remaining > 0, "{remaining} left");
    s.say("/supervise killall").await;
}

/// Operations that end leave the service's memory, and one is loaded again
/// from the store when someone asks about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn finished_operations_leave_memory_and_come_back_when_asked() {
    let s = Story::start(Setup::operation(ONE, "")).await;
    let mut issues = vec![s.issue];
    for i in 0..3 {
        issues.push(s.fake.open_issue(REPO, &format!("Again {i}")));
    }
    for issue in &issues {
        s.say_on(*issue, "/supervise start").await;
        s.until_on(*issue, "the operation completes", 90, |s| {
            s.status_comment_on(*issue).contains("status: completed")
        })
        .await;
    }
    let loaded = |text: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with("supervise_operations_loaded "))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
    };
    let mut last = None;
    for _ in 0..100 {
        let (_, m) = get(s.port, "/metrics").await;
        last = loaded(&m);
        if last == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last, Some(0.0), "four finished operations, none in memory");
    // Asked about, the first is loaded again and answers from its log.
    let before = s.bot_comments(issues[0]).len();
    s.say_on(issues[0], "/supervise status").await;
    let replies = s.replies_after(issues[0], before + 1).await;
    assert!(
        replies.last().is_some_and(|r| r.contains("solo")),
        "{replies:#?}"
    );
}

/// The operator's daily cap is charged at the operator's prices: a
/// repository whose settings make every model free (`costs: 0`) still gets
/// two haiku dispatches of a cap of 2, and the other two wait for the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repository_cannot_make_dispatches_free_against_the_operators_cap() {
    let limits = InstallationLimits {
        daily_budget: Some(2),
        ..Default::default()
    };
    let s = Story::start(Setup::operation(FOUR, "").limits(limits)).await;
    s.fake.add_file(
        REPO,
        ".github/supervise.yml",
        &format!("{SETTINGS}costs:\n  haiku: 0\n  sonnet: 0\n  opus: 0\n"),
    );
    s.say("/supervise start").await;
    s.until("two sprints done and the rest held", 90, |s| {
        s.fake
            .runs(REPO)
            .iter()
            .filter(|r| r.status == "completed")
            .count()
            >= 2
            && s.bot_comments(s.issue)
                .iter()
                .any(|c| c.contains("daily budget"))
    })
    .await;
    s.settle().await;
    assert_eq!(
        s.fake.runs(REPO).len(),
        2,
        "two dispatches of a 2× cap at haiku's 1×, whatever the repository says"
    );
}

/// Three sprints held by the installation's agent cap: one notice on the
/// issue says that agents wait, not one per sprint.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sprints_held_by_a_cap_make_one_notice_not_one_each() {
    let limits = InstallationLimits {
        agents: Some(1),
        ..Default::default()
    };
    let s = Story::start(Setup::operation(FOUR, "").limits(limits)).await;
    s.fake.add_file(REPO, ".github/supervise.yml", SETTINGS);
    s.say("/supervise start").await;
    s.until("every sprint done", 120, |s| {
        s.status_comment().contains("status: completed")
    })
    .await;
    let waits: Vec<String> = s
        .bot_comments(s.issue)
        .into_iter()
        .filter(|c| c.contains("wait to be launched"))
        .collect();
    assert_eq!(waits.len(), 1, "{waits:#?}");
    assert_eq!(s.fake.runs(REPO).len(), 4);
}

/// The fake's runner directories (a clone of the repository each) go with
/// their runs however the runs end: here the story ends while its agent
/// hangs, and the runtime that ran the run drops it.
#[test]
fn a_runner_directory_goes_with_its_run_when_the_story_ends_first() {
    let runners = || -> Vec<std::path::PathBuf> {
        let mine = format!("fake-runner-{}-", std::process::id());
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&mine))
            .map(|e| e.path())
            .collect()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let during = rt.block_on(async {
        let s = Story::start(Setup::operation(ONE, "solo 1 hang")).await;
        s.say("/supervise start").await;
        in_progress(&s, 1).await;
        runners()
    });
    assert_eq!(during.len(), 1, "the hanging run's runner: {during:?}");
    drop(rt);
    assert!(runners().is_empty(), "left behind: {:?}", runners());
}
