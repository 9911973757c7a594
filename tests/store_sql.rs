//! The service store's guarantees, on SQLite (always) and on a real PostgreSQL
//! server (the `postgres_*` tests; `scripts/test` starts one and sets
//! SUPERVISE_TEST_POSTGRES_URL, e.g. postgres://postgres:postgres@127.0.0.1:5432/postgres).

mod support;

use std::time::Duration;
use supervise::store::sql::{Intake, SqlStore};

fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display())
}

async fn sqlite() -> (SqlStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    (SqlStore::connect(&url).await.unwrap(), dir)
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
    let worker = |s: SqlStore| async move {
        let mut got = Vec::new();
        while let Some(c) = s.claim(Duration::from_secs(60)).await.unwrap() {
            got.push(c.id.clone());
            s.finish(&c.id, c.attempts, None).await.unwrap();
        }
        got
    };
    let (x, y) = tokio::join!(tokio::spawn(worker(a)), tokio::spawn(worker(b)));
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
            &[e1.clone()],
            &[Effect::PublishStatus, Effect::FinalReport],
        )
        .await
        .unwrap();
    s.append("op-1", &[e2.clone()], &[]).await.unwrap();
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
