//! The service store's guarantees, on SQLite (always) and on a real PostgreSQL
//! server (the `postgres_*` tests; `scripts/test` starts one and sets
//! SUPERVISE_TEST_POSTGRES_URL, e.g. postgres://postgres:postgres@127.0.0.1:5432/postgres).

mod support;

use std::time::Duration;
use supervise::engine::HoldKind;
use supervise::store::sql::{Intake, SqlStore};

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display())
}

async fn sqlite() -> (SqlStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    (SqlStore::connect(&url).await.unwrap(), dir)
}

/// A database in memory: intake commits on the pool's one connection there
/// (on a file, on a connection of its own).
async fn in_memory() -> SqlStore {
    SqlStore::connect("sqlite::memory:").await.unwrap()
}

async fn postgres_url() -> String {
    support::postgres_database().await
}

async fn dedupe_and_leases(s: &SqlStore) {
    assert_eq!(
        s.intake(
            "d1",
            "issue_comment",
            Some("comment:7:created"),
            Some(1),
            "{}"
        )
        .await
        .unwrap(),
        Intake::Stored
    );
    assert_eq!(
        s.intake(
            "d1",
            "issue_comment",
            Some("comment:7:created"),
            Some(1),
            "{}"
        )
        .await
        .unwrap(),
        Intake::Duplicate
    );
    assert_eq!(
        s.intake(
            "d2",
            "issue_comment",
            Some("comment:7:created"),
            Some(1),
            "{}"
        )
        .await
        .unwrap(),
        Intake::Duplicate,
        "same comment via a second hook"
    );
    let c = s.claim(Duration::from_millis(300)).await.unwrap().unwrap();
    assert_eq!((c.id.as_str(), c.attempts), ("d1", 1));
    assert!(
        s.claim(Duration::from_secs(5)).await.unwrap().is_none(),
        "leased, not pending"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let again = s.claim(Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(
        (again.id.as_str(), again.attempts),
        ("d1", 2),
        "a crashed worker's delivery comes back after its lease"
    );
    // The first worker lost the delivery: it can neither renew nor finish it.
    assert!(!s.renew("d1", 1, Duration::from_secs(5)).await.unwrap());
    s.finish("d1", 1, None).await.unwrap();
    assert_eq!(
        s.counts().await.unwrap().1,
        0,
        "a fenced finish changed nothing"
    );
    assert!(s.renew("d1", 2, Duration::from_secs(5)).await.unwrap());
    s.finish("d1", 2, None).await.unwrap();
    assert!(s.claim(Duration::from_secs(5)).await.unwrap().is_none());
    assert_eq!(s.counts().await.unwrap(), (1, 1));
    assert!(s
        .record_command("c1:0", "o/r", 3, "ana", "start", None)
        .await
        .unwrap());
    assert!(!s
        .record_command("c1:0", "o/r", 3, "ana", "start", None)
        .await
        .unwrap());
    assert_eq!(
        s.commands().await.unwrap(),
        [("ana".to_string(), "start".to_string(), None)]
    );
}

/// Two replicas claiming at once never get the same delivery.
async fn replicas_claim_each_delivery_once(a: SqlStore, b: SqlStore) {
    for i in 0..40 {
        a.intake(&format!("r{i}"), "issue_comment", None, Some(1), "{}")
            .await
            .unwrap();
    }
    // One replica claims one at a time, the other five at once.
    let worker = |s: SqlStore, n: usize| async move {
        let mut got = Vec::new();
        loop {
            let claimed = s.claim_many(Duration::from_secs(60), n).await.unwrap();
            if claimed.is_empty() {
                return got;
            }
            for c in claimed {
                got.push(c.id.clone());
                s.finish(&c.id, c.attempts, None).await.unwrap();
            }
        }
    };
    let (x, y) = tokio::join!(tokio::spawn(worker(a, 1)), tokio::spawn(worker(b, 5)));
    let mut all: Vec<String> = x.unwrap().into_iter().chain(y.unwrap()).collect();
    all.sort();
    let n = all.len();
    all.dedup();
    assert_eq!(
        (n, all.len()),
        (40, 40),
        "every delivery claimed exactly once"
    );
}

#[tokio::test]
async fn sqlite_dedupes_and_leases() {
    let (s, _d) = sqlite().await;
    dedupe_and_leases(&s).await;
}

#[tokio::test]
async fn sqlite_replicas_claim_each_delivery_once() {
    let (a, d) = sqlite().await;
    let url = sqlite_url(&d);
    let b = SqlStore::connect(&url).await.unwrap();
    replicas_claim_each_delivery_once(a, b).await;
}

#[tokio::test]
async fn sqlite_migrations_are_idempotent() {
    let (s, d) = sqlite().await;
    s.record_command("x:0", "o/r", 1, "ana", "stop", None)
        .await
        .unwrap();
    drop(s);
    let url = sqlite_url(&d);
    let s = SqlStore::connect(&url).await.unwrap();
    assert_eq!(s.commands().await.unwrap().len(), 1);
}

#[tokio::test]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_dedupes_and_leases() {
    let s = SqlStore::connect(&postgres_url().await).await.unwrap();
    dedupe_and_leases(&s).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_replicas_claim_each_delivery_once() {
    let url = postgres_url().await;
    let a = SqlStore::connect(&url).await.unwrap();
    let b = SqlStore::connect(&url).await.unwrap();
    replicas_claim_each_delivery_once(a, b).await;
}

/// The operations log: events and effects in one transaction, replayed in
/// order; effects stay pending until marked done; runs and sub-issues keep
/// what is known and never erase it.
async fn operation_log_round_trip(s: &SqlStore) {
    use supervise::engine::{Effect, Event, OverallStatus};
    use supervise::store::sql::{OperationRow, RunRow, UnitIssue};
    let row = OperationRow {
        id: "op-1".into(),
        repo: "acme/shop".into(),
        issue: 4,
        installation: 7,
        active: true,
        status_comment: None,
        context: "{}".into(),
    };
    assert!(s.create_operation(&row).await.unwrap());
    assert!(
        !s.create_operation(&row).await.unwrap(),
        "a repeated start is one operation"
    );
    let at = chrono::Utc::now();
    let e1 = Event::Overall {
        to: OverallStatus::Running,
        reason: "one".into(),
        at,
    };
    let e2 = Event::Overall {
        to: OverallStatus::Stopping,
        reason: "two".into(),
        at,
    };
    let first = s
        .append(
            "op-1",
            std::slice::from_ref(&e1),
            &[Effect::PublishStatus, Effect::FinalReport],
            None,
        )
        .await
        .unwrap();
    s.append("op-1", std::slice::from_ref(&e2), &[], None)
        .await
        .unwrap();
    s.effect_done("op-1", first.1[0].key).await.unwrap();
    let loaded = s.load_operation("op-1").await.unwrap();
    let (events, pending) = (loaded.events, loaded.pending);
    assert_eq!(events, vec![e1, e2]);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].effect, Effect::FinalReport);

    s.put_run(&RunRow {
        dispatch: "op-1/api/1/a1d1".into(),
        op: "op-1".into(),
        base_sha: Some("abc".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    s.put_run(&RunRow {
        dispatch: "op-1/api/1/a1d1".into(),
        op: "op-1".into(),
        run_id: Some(99),
        html_url: Some("u".into()),
        base_sha: Some("later".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let r = s.run_by_id(99).await.unwrap().unwrap();
    assert_eq!(r.dispatch, "op-1/api/1/a1d1");
    assert_eq!(
        r.base_sha.as_deref(),
        Some("abc"),
        "the base of a dispatch never moves"
    );

    s.set_status_comment("op-1", 1234).await.unwrap();
    s.put_unit_issue(
        "op-1",
        &UnitIssue {
            unit: "api".into(),
            number: 5,
            issue_id: 55,
            flags: "none".into(),
        },
    )
    .await
    .unwrap();
    s.put_unit_issue(
        "op-1",
        &UnitIssue {
            unit: "api".into(),
            number: 5,
            issue_id: 55,
            flags: "closed".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(s.unit_issues("op-1").await.unwrap()[0].flags, "closed");
    let found = s.operation_on("acme/shop", 4).await.unwrap().unwrap();
    assert_eq!(found.status_comment, Some(1234));
    s.set_active("op-1", false).await.unwrap();
    assert!(s.operations(true).await.unwrap().is_empty());
    assert_eq!(s.operations(false).await.unwrap().len(), 1);
}

#[tokio::test]
async fn sqlite_operation_log_round_trip() {
    let (s, _dir) = sqlite().await;
    operation_log_round_trip(&s).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_operation_log_round_trip() {
    let s = SqlStore::connect(&postgres_url().await).await.unwrap();
    operation_log_round_trip(&s).await;
}

// ---- spend across operations -----------------------------------------------------

use supervise::engine::usage::Usd;
use supervise::store::sql::{Admission, Admitted, Caps};

fn ask<'a>(dispatch: &'a str, repo: &'a str, op: &'a str, cost: u64, caps: Caps) -> Admission<'a> {
    Admission {
        dispatch,
        installation: 7,
        repo,
        op,
        model: "sonnet",
        cost,
        // A cent a unit: the caps in dollars bind beside those in units.
        usd: Usd::from_micros(cost * 10_000),
        caps,
        waiting_expires_ms: 600_000,
    }
}

/// Three operations in two repositories of one installation, each dispatch
/// asked for on either replica at random, some asked twice (a replayed
/// effect, a redelivered event), all at once: the daily caps are never passed
/// — not even by one sprint — and nothing is recorded twice.
async fn daily_caps_hold_under_any_interleaving(a: SqlStore, b: SqlStore) {
    // Rounds on installations of their own: more interleavings to catch.
    for round in 0..15 {
        daily_caps_round(&a, &b, round).await;
    }
}

async fn daily_caps_round(a: &SqlStore, b: &SqlStore, round: u64) {
    let installation = 100 + round as i64;
    let caps_a = Caps {
        installation_daily: Some(100),
        installation_daily_usd: Some(Usd::from_micros(900_000)),
        ..Caps::default()
    };
    let caps_b = Caps {
        repo_daily: Some(40),
        repo_daily_usd: Some(Usd::from_micros(300_000)),
        ..caps_a
    };
    let ops = [
        ("op1", "acme/shop", caps_a),
        ("op2", "acme/shop", caps_a),
        ("op3", "acme/blog", caps_b),
    ];
    // Every dispatch of every operation at once, each on either replica.
    let mut seed = 0x9e37_79b9_u64 ^ round;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    let mut tasks = Vec::new();
    for (op, repo, caps) in ops {
        for i in 0..12 {
            let d = format!("{op}-{round}-{i}");
            let cost = [1, 10, 30][(next() % 3) as usize];
            let replicas: Vec<SqlStore> = (0..1 + next() % 2)
                .map(|_| {
                    if next() % 2 == 0 {
                        a.clone()
                    } else {
                        b.clone()
                    }
                })
                .collect();
            tasks.push(tokio::spawn(async move {
                let mut admitted = Vec::new();
                for store in replicas {
                    let asked = Admission {
                        installation,
                        ..ask(&d, repo, op, cost, caps)
                    };
                    match store.admit(&asked).await.unwrap() {
                        Admitted::Now => admitted.push((d.clone(), cost)),
                        Admitted::Before | Admitted::Held { .. } => {}
                    }
                }
                admitted
            }));
        }
    }
    let mut admitted = Vec::new();
    for t in tasks {
        admitted.extend(t.await.unwrap());
    }
    let mut ids: Vec<&String> = admitted.iter().map(|(d, _)| d).collect();
    ids.sort();
    let n = ids.len();
    ids.dedup();
    assert_eq!(n, ids.len(), "no dispatch admitted twice");
    let since = chrono::Utc::now() - chrono::Duration::days(1);
    let recorded = a.spend_since(installation, since).await.unwrap();
    assert_eq!(recorded.len(), n, "each admitted dispatch recorded once");
    let total: u64 = recorded.iter().map(|r| r.cost).sum();
    let blog: u64 = recorded
        .iter()
        .filter(|r| r.repo == "acme/blog")
        .map(|r| r.cost)
        .sum();
    assert!(total <= 100, "installation cap passed: {total}");
    assert!(blog <= 40, "repository cap passed: {blog}");
    assert!(total >= 60, "the caps leave room used: {total}");
    // In dollars: $0.90 for the installation, $0.30 for the blog.
    let usd: Usd = recorded.iter().map(|r| r.usd).sum();
    let blog_usd: Usd = recorded
        .iter()
        .filter(|r| r.repo == "acme/blog")
        .map(|r| r.usd)
        .sum();
    assert!(
        usd.micros() <= 900_000,
        "installation's dollar cap passed: {usd}"
    );
    assert!(
        blog_usd.micros() <= 300_000,
        "repository's dollar cap passed: {blog_usd}"
    );
    assert_eq!(
        usd.micros(),
        total * 10_000,
        "each dispatch's dollars as expected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_daily_caps_hold_under_any_interleaving() {
    let (a, d) = sqlite().await;
    let b = SqlStore::connect(&sqlite_url(&d)).await.unwrap();
    daily_caps_hold_under_any_interleaving(a, b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_daily_caps_hold_under_any_interleaving() {
    let url = postgres_url().await;
    let a = SqlStore::connect(&url).await.unwrap();
    let b = SqlStore::connect(&url).await.unwrap();
    daily_caps_hold_under_any_interleaving(a, b).await;
}

/// At most two agents across the installation; when a slot frees, the
/// operation with fewer agents in flight goes first, whoever asked first.
#[tokio::test]
async fn agents_in_flight_are_capped_and_shared_fairly_between_operations() {
    let (s, _d) = sqlite().await;
    let caps = Caps {
        installation_agents: Some(2),
        ..Caps::default()
    };
    let admit = |d: &'static str, op: &'static str| {
        let s = s.clone();
        async move { s.admit(&ask(d, "acme/shop", op, 10, caps)).await.unwrap() }
    };
    assert_eq!(admit("a1", "a").await, Admitted::Now);
    assert_eq!(admit("a2", "a").await, Admitted::Now);
    // Full: `a` asks for a third first, then `b` and `c` ask.
    assert!(matches!(admit("a3", "a").await, Admitted::Held { .. }));
    let Admitted::Held { reason, .. } = admit("b1", "b").await else {
        panic!("b1 must wait");
    };
    assert!(
        reason.contains("the most it allows at once (2)"),
        "{reason}"
    );
    assert!(matches!(admit("c1", "c").await, Admitted::Held { .. }));
    s.spend_ended("a1").await.unwrap();
    // One slot: `a` still has an agent in flight, `b` and `c` none; `b` asked first.
    assert!(matches!(admit("a3", "a").await, Admitted::Held { .. }));
    assert!(matches!(admit("c1", "c").await, Admitted::Held { .. }));
    assert_eq!(admit("b1", "b").await, Admitted::Now);
    s.spend_ended("a2").await.unwrap();
    // `c` has none in flight, `a` none either now, `b` one: `a` asked first.
    assert_eq!(admit("a3", "a").await, Admitted::Now);
    assert!(matches!(admit("c1", "c").await, Admitted::Held { .. }));
    // The same dispatch asked again spends nothing more.
    assert_eq!(admit("a3", "a").await, Admitted::Before);
    let all = s
        .spend_since(7, chrono::Utc::now() - chrono::Duration::days(1))
        .await
        .unwrap();
    assert_eq!(all.len(), 4);
}

/// A dispatch that would pass the daily budget is told when it fits again:
/// when enough of the last 24 hours' spend has rolled out of the window.
#[tokio::test]
async fn a_held_dispatch_is_told_when_the_window_allows_it() {
    let (s, _d) = sqlite().await;
    let caps = Caps {
        installation_daily: Some(30),
        ..Caps::default()
    };
    for (d, cost) in [("x1", 10), ("x2", 10), ("x3", 10)] {
        assert_eq!(
            s.admit(&ask(d, "acme/shop", "x", cost, caps))
                .await
                .unwrap(),
            Admitted::Now
        );
    }
    let first = s
        .spend_since(7, chrono::Utc::now() - chrono::Duration::days(1))
        .await
        .unwrap()[0]
        .at;
    let Admitted::Held {
        reason,
        until,
        kind: HoldKind::Budget,
    } = s
        .admit(&ask("x4", "acme/shop", "x", 10, caps))
        .await
        .unwrap()
    else {
        panic!("over the cap");
    };
    assert!(
        reason.contains("daily budget is 30× and 30× was dispatched"),
        "{reason}"
    );
    assert_eq!(until, Some(first + chrono::Duration::days(1)));
    let Admitted::Held {
        reason,
        until,
        kind: HoldKind::Budget,
    } = s
        .admit(&ask("x5", "acme/shop", "x", 40, caps))
        .await
        .unwrap()
    else {
        panic!("more than the cap");
    };
    assert!(
        reason.contains("more than the installation's daily budget"),
        "{reason}"
    );
    assert_eq!(until, None);
}

/// Deliveries stored through the group-commit queue all at once, some the
/// same delivery again and some the same comment under another id: each is
/// stored once, the others are duplicates, and every stored one is there to
/// be claimed.
async fn group_commit_stores_each_delivery_once(s: SqlStore) {
    use supervise::store::sql::{IntakeQueue, NewDelivery};
    let q = IntakeQueue::start(s.clone());
    let mut tasks = Vec::new();
    for i in 0..300 {
        let q = q.clone();
        // 100 distinct deliveries; each sent again under its own id, and a
        // third time under another id with the same comment.
        let (id, dedupe) = match i % 3 {
            0 | 1 => (format!("g{}", i / 3), format!("comment:{}:created", i / 3)),
            _ => (format!("h{}", i / 3), format!("comment:{}:created", i / 3)),
        };
        tasks.push(tokio::spawn(async move {
            q.submit(NewDelivery {
                id,
                event: "issue_comment".into(),
                dedupe: Some(dedupe),
                installation: Some(1),
                payload: "{}".into(),
                settled: false,
            })
            .await
            .unwrap()
        }));
    }
    let mut stored = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), Intake::Stored) {
            stored += 1;
        }
    }
    assert_eq!(stored, 100, "one of each three stored");
    let mut claimed = 0;
    while let Some(c) = s.claim(Duration::from_secs(60)).await.unwrap() {
        s.finish(&c.id, c.attempts, None).await.unwrap();
        claimed += 1;
    }
    assert_eq!(claimed, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_group_commit_stores_each_delivery_once() {
    let (s, _d) = sqlite().await;
    group_commit_stores_each_delivery_once(s).await;
}

/// The same on a database in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_memory_sqlite_group_commit_stores_each_delivery_once() {
    let s = in_memory().await;
    group_commit_stores_each_delivery_once(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_group_commit_stores_each_delivery_once() {
    let s = SqlStore::connect(&postgres_url().await).await.unwrap();
    group_commit_stores_each_delivery_once(s).await;
}

/// Submits delivery `d{n}` (body `{"n":n}`) through `q`.
async fn submit_numbered(q: supervise::store::sql::IntakeQueue, n: u32) -> Intake {
    q.submit(supervise::store::sql::NewDelivery {
        id: format!("d{n}"),
        event: "issue_comment".into(),
        dedupe: None,
        installation: Some(1),
        payload: format!("{{\"n\":{n}}}"),
        settled: false,
    })
    .await
    .unwrap()
}

/// Deliveries stored while the workers have room are stored claimed (first
/// attempt, leased) and handed over in memory, in order; past the room they
/// are stored pending, and none is handed over again until a claim finds the
/// store drained, so a newer delivery never overtakes one waiting there.
async fn handed_over_deliveries_are_claimed_and_the_rest_wait_in_order(s: SqlStore) {
    use supervise::store::sql::{Handoff, IntakeQueue};
    let lease = Duration::from_secs(60);
    let h = Handoff::new(3, lease);
    let q = IntakeQueue::start_with(s.clone(), Some(h.clone()));
    let submit = |n: u32| submit_numbered(q.clone(), n);
    // At the start the store may hold deliveries from before: nothing is
    // handed over until a claim has found it empty.
    assert_eq!(submit(0).await, Intake::Stored);
    assert!(
        h.take().is_none(),
        "handed over before the store was drained"
    );
    let found_none = Some(std::time::Instant::now());
    assert!(
        h.worth_a_claim(found_none),
        "the store may hold deliveries from before"
    );
    let mark = h.pending_mark();
    let c = s.claim_many(lease, 8).await.unwrap();
    assert_eq!(c.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["d0"]);
    assert!(s.claim_many(lease, 8).await.unwrap().is_empty());
    h.drained_at(mark);
    // Idle workers leave the store (and SQLite's one connection) alone...
    let found_none = Some(std::time::Instant::now());
    assert!(
        !h.worth_a_claim(found_none),
        "a claim right after one found nothing"
    );
    assert!(
        h.worth_a_claim(None),
        "the last claim found some: maybe more"
    );
    for n in 1..=5 {
        assert_eq!(submit(n).await, Intake::Stored);
    }
    // ...until something is stored pending there.
    assert!(h.worth_a_claim(found_none), "d4 and d5 wait in the store");
    let handed: Vec<_> = std::iter::from_fn(|| h.take()).map(|(_, c)| c).collect();
    assert_eq!(
        handed
            .iter()
            .map(|c| (c.id.as_str(), c.attempts, c.payload.as_str()))
            .collect::<Vec<_>>(),
        [
            ("d1", 1, "{\"n\":1}"),
            ("d2", 1, "{\"n\":2}"),
            ("d3", 1, "{\"n\":3}")
        ],
        "the room's worth, in order, bodies and all"
    );
    // Those handed over are leased: no claim takes them; the rest are pending.
    let mark = h.pending_mark();
    let c = s.claim_many(lease, 8).await.unwrap();
    assert_eq!(
        c.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["d4", "d5"]
    );
    // Room again, but d6 comes while the store is not known to be drained.
    assert_eq!(submit(6).await, Intake::Stored);
    assert!(h.take().is_none(), "d6 overtook the store's line");
    h.drained_at(mark); // a claim begun before d6 was stored proves nothing
    assert_eq!(submit(7).await, Intake::Stored);
    assert!(h.take().is_none(), "d7 overtook d6");
    let mark = h.pending_mark();
    let c = s.claim_many(lease, 8).await.unwrap();
    assert_eq!(
        c.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["d6", "d7"]
    );
    assert!(s.claim_many(lease, 8).await.unwrap().is_empty());
    h.drained_at(mark);
    let found_none = Some(std::time::Instant::now());
    assert!(!h.worth_a_claim(found_none));
    // Deliveries also come due there unannounced (a lease run out, a
    // retry's delay over): the workers look again after a while.
    tokio::time::sleep(supervise::store::sql::LOOK_AGAIN).await;
    assert!(
        h.worth_a_claim(found_none),
        "never looking again would strand them"
    );
    assert_eq!(submit(8).await, Intake::Stored);
    assert_eq!(h.take().map(|(_, c)| c.id), Some("d8".to_string()));
    // The same delivery again is a duplicate, and is not handed over twice.
    assert_eq!(submit(8).await, Intake::Duplicate);
    assert!(h.take().is_none());
    // Ends recorded for handed-over deliveries hold (attempt 1 is theirs).
    for c in &handed {
        q.finish(&c.id, c.attempts, None).await.unwrap();
    }
    assert_eq!(s.counts().await.unwrap().1, 3, "three done");
}

/// On a SQLite file, intake's commits claim, in order, what waits in the
/// store (see `Handoff::claim_room`): the same line is kept, without the
/// workers' claims.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_handed_over_deliveries_are_claimed_and_the_rest_wait_in_order() {
    use supervise::store::sql::{Handoff, IntakeQueue};
    let (s, _d) = sqlite().await;
    let h = Handoff::new(3, Duration::from_secs(60));
    let q = IntakeQueue::start_with(s.clone(), Some(h.clone()));
    let submit = |n: u32| submit_numbered(q.clone(), n);
    let take_all =
        || -> Vec<String> { std::iter::from_fn(|| h.take()).map(|(_, c)| c.id).collect() };
    // The store may hold deliveries from before: the commit reads it, and
    // d0 is the oldest due there.
    assert_eq!(submit(0).await, Intake::Stored);
    assert_eq!(take_all(), ["d0"]);
    // None left: handed over as stored, while there is room; then pending.
    for n in 1..=5 {
        assert_eq!(submit(n).await, Intake::Stored);
    }
    assert_eq!(take_all(), ["d1", "d2", "d3"]);
    // Room again: d6's commit claims d4 and d5 first, then d6.
    assert_eq!(submit(6).await, Intake::Stored);
    assert_eq!(submit(7).await, Intake::Stored);
    assert_eq!(take_all(), ["d4", "d5", "d6"]);
    assert_eq!(submit(8).await, Intake::Stored);
    assert_eq!(take_all(), ["d7", "d8"], "d8 overtook d7");
    // Drained: handed over as stored again.
    assert_eq!(submit(9).await, Intake::Stored);
    assert_eq!(take_all(), ["d9"]);
    assert_eq!(submit(9).await, Intake::Duplicate);
    assert!(h.take().is_none(), "a duplicate handed over");
    assert!(
        s.claim_many(Duration::from_secs(60), 16)
            .await
            .unwrap()
            .is_empty(),
        "everything is claimed once"
    );
    for n in 0..=9 {
        q.finish(&format!("d{n}"), 1, None).await.unwrap();
    }
    assert_eq!(
        s.counts().await.unwrap().1,
        10,
        "every end recorded on attempt 1"
    );
}

/// The same on a database in memory, whose workers claim what waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_sqlite_handed_over_deliveries_are_claimed_and_the_rest_wait_in_order() {
    let s = in_memory().await;
    handed_over_deliveries_are_claimed_and_the_rest_wait_in_order(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_handed_over_deliveries_are_claimed_and_the_rest_wait_in_order() {
    let s = SqlStore::connect(&postgres_url().await).await.unwrap();
    handed_over_deliveries_are_claimed_and_the_rest_wait_in_order(s).await;
}

/// Deliveries that need nothing done (`settled`) are stored done, whatever
/// batch they share: never handed over, never claimed, and they take no room
/// from those that need a worker.
async fn settled_deliveries_are_stored_done_and_never_handed_over(s: SqlStore) {
    use supervise::store::sql::{Handoff, IntakeQueue, NewDelivery};
    let lease = Duration::from_secs(60);
    let h = Handoff::new(1, lease);
    h.drained_at(h.pending_mark());
    let q = IntakeQueue::start_with(s.clone(), Some(h.clone()));
    let d = |id: &str, settled: bool| NewDelivery {
        id: id.into(),
        event: "issue_comment".into(),
        dedupe: Some(format!("comment:{id}:created")),
        installation: Some(1),
        payload: "{}".into(),
        settled,
    };
    let answers = futures_util::future::join_all(
        [d("s1", true), d("w1", false), d("s2", true), d("w2", false)].map(|d| q.submit(d)),
    )
    .await;
    assert!(
        answers.iter().all(|a| matches!(a, Ok(Intake::Stored))),
        "{answers:?}"
    );
    assert_eq!(
        s.counts().await.unwrap(),
        (4, 2),
        "the settled two are done"
    );
    // Only the bodies a worker will read are kept.
    for (id, kept) in [("s1", false), ("w1", true), ("s2", false), ("w2", true)] {
        assert_eq!(
            s.body(id).await.unwrap().is_some(),
            kept,
            "{id}'s body kept: {kept}"
        );
    }
    let mut handed: Vec<String> = std::iter::from_fn(|| h.take()).map(|(_, c)| c.id).collect();
    assert_eq!(
        handed.len(),
        1,
        "the room's one, given to one that needs a worker: {handed:?}"
    );
    handed.extend(
        s.claim_many(lease, 8)
            .await
            .unwrap()
            .into_iter()
            .map(|c| c.id),
    );
    handed.sort();
    assert_eq!(
        handed,
        ["w1", "w2"],
        "each that needs a worker reaches one, once"
    );
    // Alone, with no hand-over, it is stored done too.
    let alone = IntakeQueue::start(s.clone());
    assert_eq!(alone.submit(d("s3", true)).await.unwrap(), Intake::Stored);
    assert_eq!(
        alone.submit(d("s3", true)).await.unwrap(),
        Intake::Duplicate
    );
    assert!(s.claim_many(lease, 8).await.unwrap().is_empty());
    assert_eq!(s.counts().await.unwrap(), (5, 3));
    assert_eq!(s.body("s3").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_settled_deliveries_are_stored_done_and_never_handed_over() {
    let (s, _d) = sqlite().await;
    settled_deliveries_are_stored_done_and_never_handed_over(s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_sqlite_settled_deliveries_are_stored_done_and_never_handed_over() {
    settled_deliveries_are_stored_done_and_never_handed_over(in_memory().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_settled_deliveries_are_stored_done_and_never_handed_over() {
    let s = SqlStore::connect(&postgres_url().await).await.unwrap();
    settled_deliveries_are_stored_done_and_never_handed_over(s).await;
}

/// A restarted replica takes back at once what it held when it stopped —
/// claimed deliveries, a delivery claimed again after a retry delay among
/// them — but not a delivery still waiting out its delay, nor another
/// replica's.
async fn a_restart_takes_back_what_this_replica_held(url: &str) {
    let lease = Duration::from_secs(600);
    let mine = SqlStore::connect(url).await.unwrap().held_by("replica-a");
    let theirs = SqlStore::connect(url).await.unwrap().held_by("replica-b");
    for id in ["held", "waiting", "again", "theirs"] {
        mine.intake(id, "issue_comment", None, Some(1), "{}")
            .await
            .unwrap();
        // Claims take the oldest by arrival, in milliseconds, then by id:
        // two stored in one millisecond would be taken in the order of
        // their ids ("theirs" before "waiting"), not of their arrival.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut claimed = mine.claim_many(lease, 3).await.unwrap();
    claimed.sort_by(|a, b| a.id.cmp(&b.id));
    let ids: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["again", "held", "waiting"]);
    let other = theirs.claim(lease).await.unwrap().unwrap();
    assert_eq!(other.id, "theirs");
    // `waiting` failed and waits an hour; `again` failed, waited no time
    // and was claimed anew (a second attempt, its error still recorded).
    mine.retry_later("waiting", 1, Duration::from_secs(3600), "502 from GitHub")
        .await
        .unwrap();
    mine.retry_later("again", 1, Duration::ZERO, "502 from GitHub")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let again = mine.claim(lease).await.unwrap().unwrap();
    assert_eq!((again.id.as_str(), again.attempts), ("again", 2));

    // A run never puts back what it holds itself.
    assert_eq!(mine.release_held().await.unwrap(), 0);

    // Replica a restarts.
    let restarted = SqlStore::connect(url).await.unwrap().held_by("replica-a");
    assert_eq!(restarted.release_held().await.unwrap(), 2, "held and again");
    let mut back: Vec<(String, i64)> = restarted
        .claim_many(lease, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.id, c.attempts))
        .collect();
    back.sort();
    assert_eq!(
        back,
        [("again".to_string(), 3), ("held".to_string(), 2)],
        "`waiting` keeps its delay and `theirs` its holder"
    );
    // A write of the last run that lands after the restart (a commit the
    // kill cut off, finished by the server) is taken back by a second look,
    // which leaves the new run's own claims alone.
    mine.intake("late", "issue_comment", None, Some(1), "{}")
        .await
        .unwrap();
    let late = mine.claim(lease).await.unwrap().unwrap();
    assert_eq!(late.id, "late");
    assert_eq!(restarted.release_held().await.unwrap(), 1, "only `late`");
    let taken = restarted.claim(lease).await.unwrap().unwrap();
    assert_eq!((taken.id.as_str(), taken.attempts), ("late", 2));
}

#[tokio::test]
async fn sqlite_a_restart_takes_back_what_this_replica_held() {
    let dir = tempfile::tempdir().unwrap();
    a_restart_takes_back_what_this_replica_held(&sqlite_url(&dir)).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_a_restart_takes_back_what_this_replica_held() {
    a_restart_takes_back_what_this_replica_held(&postgres_url().await).await;
}

/// Deliveries whose processing ended are forgotten once older than the
/// retention — rows and bodies, a few at a time, oldest first — and those
/// still to be processed are kept whatever their age.
async fn finished_deliveries_are_forgotten_after_their_retention(s: SqlStore) {
    let lease = Duration::from_secs(60);
    for n in 0..5 {
        let (id, body) = (format!("d{n}"), format!("{{\"n\":{n}}}"));
        let stored = s.intake(&id, "issue_comment", None, Some(1), &body).await;
        assert_eq!(stored.unwrap(), Intake::Stored);
    }
    let claimed = s.claim_many(lease, 4).await.unwrap();
    assert_eq!(claimed.len(), 4);
    for c in &claimed {
        let error = (c.id == "d3").then_some("boom");
        s.finish(&c.id, c.attempts, error).await.unwrap();
    }
    // None is older than the epoch.
    assert_eq!(s.forget_finished(0, 10).await.unwrap(), 0);
    let later = chrono::Utc::now().timestamp_millis() + 1_000;
    assert_eq!(s.forget_finished(later, 3).await.unwrap(), 3);
    assert_eq!(
        s.forget_finished(later, 3).await.unwrap(),
        1,
        "the failed one too"
    );
    assert_eq!(s.forget_finished(later, 3).await.unwrap(), 0);
    assert_eq!(s.counts().await.unwrap(), (1, 0), "d4 waits still");
    // A forgotten delivery's body went with it: the same id is new again,
    // with its new body (a body left behind would have been kept instead).
    let again = s.intake("d0", "issue_comment", None, Some(1), "{\"again\":true}");
    assert_eq!(again.await.unwrap(), Intake::Stored);
    let next: Vec<_> = s.claim_many(lease, 4).await.unwrap();
    assert_eq!(
        next.iter()
            .map(|c| (c.id.as_str(), c.payload.as_str()))
            .collect::<Vec<_>>(),
        [("d4", "{\"n\":4}"), ("d0", "{\"again\":true}")]
    );
}

#[tokio::test]
async fn sqlite_finished_deliveries_are_forgotten_after_their_retention() {
    let (s, _d) = sqlite().await;
    finished_deliveries_are_forgotten_after_their_retention(s).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_finished_deliveries_are_forgotten_after_their_retention() {
    let s = SqlStore::connect(&postgres_url().await).await.unwrap();
    finished_deliveries_are_forgotten_after_their_retention(s).await;
}

/// On PostgreSQL a claim passes over the rows another claim is taking: with
/// the first eight pending locked by a claim still under way, the next claim
/// takes the eight after them at once — neither waits for the first nor
/// comes back empty-handed once it ends, which held a restarted service's
/// backlog to a few claims a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_a_claim_passes_over_rows_another_claim_is_taking() {
    let url = postgres_url().await;
    let s = SqlStore::connect(&url).await.unwrap();
    for n in 0..20 {
        let id = format!("d{n:02}");
        s.intake(&id, "ping", None, None, "{}").await.unwrap();
    }
    // Another claim, under way: it holds the first eight.
    let other = sqlx::AnyPool::connect(&url).await.unwrap();
    let mut taking = other.begin().await.unwrap();
    sqlx::query("SELECT id FROM deliveries WHERE status = 'pending' ORDER BY received_at, id LIMIT 8 FOR UPDATE")
        .fetch_all(&mut *taking)
        .await
        .unwrap();
    let claim = s.claim_many(Duration::from_secs(60), 8);
    let got = tokio::time::timeout(Duration::from_secs(5), claim)
        .await
        .expect("the claim waited for the other to end")
        .unwrap();
    let ids: Vec<&str> = got.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(
        ids,
        ["d08", "d09", "d10", "d11", "d12", "d13", "d14", "d15"]
    );
    taking.rollback().await.unwrap();
}

/// Deliveries arriving together are stored together and all handed over:
/// a batch whose statement failed would be stored one by one, pending, and
/// not handed over (on PostgreSQL the batch's rows are padded to a power of
/// two with rows of NULLs, which must store nothing and fail nothing).
async fn a_burst_is_stored_in_batches_and_all_handed_over(s: SqlStore) {
    use supervise::store::sql::{Handoff, IntakeQueue, NewDelivery};
    let h = Handoff::new(64, Duration::from_secs(60));
    h.drained_at(h.pending_mark());
    let q = IntakeQueue::start_with(s.clone(), Some(h.clone()));
    // On one thread, every submission is queued before the writer runs:
    // they arrive together, as one batch (23 rows, padded to 32).
    let burst = (0..23usize).map(|n| {
        q.submit(NewDelivery {
            id: format!("b{n:02}"),
            event: "issue_comment".into(),
            dedupe: Some(format!("comment:{}", n % 20)),
            installation: n.is_multiple_of(2).then_some(7),
            payload: format!("{{\"n\":{n}}}"),
            settled: false,
        })
    });
    let stored = futures_util::future::join_all(burst)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap() == Intake::Stored)
        .count();
    assert_eq!(stored, 20, "three share a comment with another: duplicates");
    let handed: Vec<_> = std::iter::from_fn(|| h.take()).map(|(_, c)| c).collect();
    assert_eq!(handed.len(), 20, "all stored in batches, none alone");
    for c in &handed {
        let n: usize = c.id[1..].parse().unwrap();
        assert_eq!(c.payload, format!("{{\"n\":{n}}}"));
        assert_eq!(c.installation, n.is_multiple_of(2).then_some(7));
    }
    assert_eq!(
        s.counts().await.unwrap(),
        (20, 0),
        "no row from the padding"
    );
}

#[tokio::test]
async fn sqlite_a_burst_is_stored_in_batches_and_all_handed_over() {
    let (s, _d) = sqlite().await;
    a_burst_is_stored_in_batches_and_all_handed_over(s).await;
}

/// The same on a database in memory.
#[tokio::test]
async fn in_memory_sqlite_a_burst_is_stored_in_batches_and_all_handed_over() {
    let s = in_memory().await;
    a_burst_is_stored_in_batches_and_all_handed_over(s).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_a_burst_is_stored_in_batches_and_all_handed_over() {
    let s = SqlStore::connect(&postgres_url().await).await.unwrap();
    a_burst_is_stored_in_batches_and_all_handed_over(s).await;
}

/// After PostgreSQL has closed every connection — a restart, a failover,
/// an administrator — deliveries are still stored: the pool checks a
/// connection before handing it out, so none is refused for having met a
/// dead one (without the check, four of the next five were).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: scripts/test starts one"]
async fn postgres_deliveries_are_stored_after_the_server_closed_every_connection() {
    use supervise::store::sql::{Handoff, IntakeQueue, NewDelivery};
    let url = postgres_url().await;
    let s = SqlStore::connect(&url).await.unwrap();
    let q = IntakeQueue::start_with(s.clone(), Some(Handoff::new(64, Duration::from_secs(60))));
    let submit = |n: usize| {
        q.submit(NewDelivery {
            id: format!("k{n}"),
            event: "ping".into(),
            dedupe: None,
            installation: None,
            payload: "{}".into(),
            settled: false,
        })
    };
    // Several connections open in the pool, then all closed by the server.
    let stores: Vec<_> = (0..8).map(|_| s.clone()).collect();
    futures_util::future::join_all(
        stores
            .iter()
            .map(|s| s.claim_many(Duration::from_secs(1), 1)),
    )
    .await;
    assert_eq!(submit(0).await.unwrap(), Intake::Stored);
    let admin = sqlx::AnyPool::connect(&url).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        .fetch_all(&admin)
        .await
        .unwrap();
    for n in 1..=10 {
        let stored = submit(n).await;
        assert!(
            matches!(stored, Ok(Intake::Stored)),
            "delivery {n} after the server closed the connections: {stored:?}"
        );
    }
    assert_eq!(s.counts().await.unwrap().0, 11);
}
