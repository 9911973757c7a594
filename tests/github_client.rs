//! The GitHub adapter against the fake as GitHub behaves on the points that
//! hid bugs: lists come in pages, and 422 means more than one thing.

mod support;

use secrecy::SecretString;
use std::path::Path;
use supervise::github::repo::Repo;
use supervise::github::{GitHub, GitHubError};

const REPO: &str = "acme/shop";

async fn client() -> (std::sync::Arc<fake_github::FakeGitHub>, GitHub) {
    let fake = support::fake_github(None, None).await;
    fake.ensure_repo(REPO);
    let key = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pem"),
    )
    .unwrap();
    let gh = GitHub::new(&fake.url(), 42, &SecretString::from(key)).unwrap();
    (fake, gh)
}

fn repo_of(gh: &GitHub) -> Repo<'_> {
    Repo {
        gh,
        installation: 7,
        name: REPO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lists_are_read_to_the_last_page() {
    let (fake, gh) = client().await;
    let repo = repo_of(&gh);
    let issue = fake.open_issue(REPO, "a busy thread");
    for i in 0..250 {
        let body = if i == 237 {
            "an old answer <!-- supervise:reply 1/0 -->".to_string()
        } else {
            format!("comment {i}")
        };
        let by = if i == 237 {
            fake_github::APP_LOGIN
        } else {
            "mia"
        };
        fake.comment(REPO, issue, by, &body, false).await;
    }
    let all = repo.comments(issue, None).await.unwrap();
    assert_eq!(all.len(), 250, "every page was read");
    // The reply on page 3 is found: nothing is posted twice.
    repo.comment_once(issue, None, "<!-- supervise:reply 1/0 -->", "again")
        .await
        .unwrap();
    assert_eq!(fake.comments(REPO, issue).len(), 250);
    let pages = fake
        .request_log()
        .iter()
        .filter(|(_, e, s)| e.contains("/comments") && e.starts_with("GET") && *s == 200)
        .count();
    assert!(pages >= 3, "read page by page: {pages} requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_issue_already_linked_is_done_but_one_with_another_parent_is_refused() {
    let (fake, gh) = client().await;
    let repo = repo_of(&gh);
    let (a, b, c) = (
        fake.open_issue(REPO, "parent"),
        fake.open_issue(REPO, "child"),
        fake.open_issue(REPO, "another parent"),
    );
    let child_id = supervise::github::answers::IssueId(
        fake.issues(REPO).iter().find(|i| i.number == b).unwrap().id,
    );
    repo.add_sub_issue(a, child_id).await.unwrap();
    // The repeated effect (say after a crash) is done, not an error.
    repo.add_sub_issue(a, child_id).await.unwrap();
    match repo.add_sub_issue(c, child_id).await {
        Err(GitHubError::Http {
            status: 422, body, ..
        }) => {
            assert!(body.contains("parent"), "{body}")
        }
        other => panic!("a second parent must be refused, got {other:?}"),
    }
}

/// A branch whose making was answered 502 (GitHub made it, the answer was
/// lost) is asked for again at once: the second try is told it exists, so
/// the caller goes on instead of failing all it did before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_made_with_a_lost_answer_is_found_made() {
    let (fake, gh) = client().await;
    let repo = repo_of(&gh);
    let main = repo.branch_sha("main").await.unwrap().unwrap();
    fake.lose_answers("/git/refs", 1);
    assert!(!repo.create_branch("lost", &main).await.unwrap());
    assert_eq!(fake.answers_lost(), 1);
    assert_eq!(repo.branch_sha("lost").await.unwrap(), Some(main.clone()));
    // Two answers lost and a third try: still one branch, no error.
    fake.lose_answers("/git/refs", 2);
    assert!(!repo.create_branch("twice", &main).await.unwrap());
    assert_eq!(repo.branch_sha("twice").await.unwrap(), Some(main));
}

/// Whether a pull request merges is read from the pull request itself (a list
/// item has no `mergeable`), waiting out GitHub's first `null`; a merge at the
/// verified head is refused once the branch has moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_are_seen_and_a_moved_branch_is_not_merged() {
    let (fake, gh) = client().await;
    let repo = repo_of(&gh);
    fake.add_file(REPO, "shared.txt", "base\n");
    let main = repo.branch_sha("main").await.unwrap().unwrap();
    for b in ["clash", "clean"] {
        repo.create_branch(b, &main).await.unwrap();
    }
    repo.put_file("clash", "shared.txt", "theirs\n", "theirs")
        .await
        .unwrap();
    repo.put_file("main", "shared.txt", "ours\n", "ours")
        .await
        .unwrap();
    let clash = repo
        .ensure_pull("clash", "main", "clash", "")
        .await
        .unwrap();
    let listed = repo.pull_for("clash").await.unwrap().unwrap();
    assert_eq!(listed.mergeable, None, "list items do not say");
    assert_eq!(repo.mergeable(clash, None).await.unwrap(), Some(false));

    repo.put_file("clean", "new.txt", "new\n", "new")
        .await
        .unwrap();
    let clean = repo
        .ensure_pull("clean", "main", "clean", "")
        .await
        .unwrap();
    assert_eq!(repo.mergeable(clean, None).await.unwrap(), Some(true));
    // Opening a pull request that is open already finds it; a branch with
    // nothing beyond its base gets none (GitHub's "No commits between").
    let again = repo.open_pull("clean", "main", "clean", "").await.unwrap();
    assert_eq!(again.map(|p| p.number), Some(clean));
    repo.create_branch("empty", &main).await.unwrap();
    assert!(repo
        .open_pull("empty", "clean", "empty", "")
        .await
        .unwrap()
        .is_none());
    assert!(repo
        .open_pull("gone", "main", "gone", "")
        .await
        .unwrap()
        .is_none());
    let verified = repo.branch_sha("clean").await.unwrap().unwrap();
    // The branch moves after verification: the merge is refused, not made.
    repo.put_file("clean", "late.txt", "unverified\n", "late")
        .await
        .unwrap();
    assert_eq!(
        repo.merge(clean, Some(&verified)).await.unwrap(),
        supervise::github::repo::Merge::HeadMoved
    );
    let now = repo.branch_sha("clean").await.unwrap().unwrap();
    let supervise::github::repo::Merge::Merged(Some(head)) =
        repo.merge(clean, Some(&now)).await.unwrap()
    else {
        panic!("merged at the verified head");
    };
    // The merge commit is the base's new head, as GitHub says it.
    assert_eq!(Some(head), repo.branch_sha("main").await.unwrap());
    assert_eq!(
        repo.merge(clash, None).await.unwrap(),
        supervise::github::repo::Merge::Conflict
    );
}

/// GitHub refuses bodies over 65,536 characters (and check-run summaries over
/// 65,535): what is posted is cut to fit, with a note, keeping its marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_texts_are_cut_to_fit_instead_of_refused() {
    let (fake, gh) = client().await;
    let repo = repo_of(&gh);
    let issue = fake.open_issue(REPO, "long");
    let long = "a line of a very long status table\n".repeat(3000);
    repo.comment_once(issue, None, "<!-- supervise:reply 9 -->", &long)
        .await
        .unwrap();
    let posted = fake.comments(REPO, issue);
    assert_eq!(posted.len(), 1);
    assert!(posted[0].body.chars().count() <= 65_536);
    assert!(posted[0].body.ends_with("<!-- supervise:reply 9 -->"));
    // Found again by its marker: not posted twice.
    repo.comment_once(issue, None, "<!-- supervise:reply 9 -->", &long)
        .await
        .unwrap();
    assert_eq!(fake.comments(REPO, issue).len(), 1);
    let head = repo.branch_sha("main").await.unwrap().unwrap();
    repo.create_check(serde_json::json!({
        "name": "supervise: long", "head_sha": head, "status": "completed",
        "conclusion": "success", "output": { "title": "t", "summary": long },
    }))
    .await
    .unwrap();
    assert_eq!(fake.check_runs(REPO).len(), 1);
}

/// An installation's token reaches only that installation's repositories,
/// as on GitHub: a repository of another account is not found with it (so a
/// mix-up of installations fails in the tests as it would in production).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installation_token_reaches_only_its_own_repositories() {
    let (fake, gh) = client().await;
    fake.set_installation("other", 77);
    fake.ensure_repo("other/tools");
    fake.add_file("other/tools", "README.md", "theirs\n");
    let wrong = Repo {
        gh: &gh,
        installation: 7,
        name: "other/tools",
    };
    match wrong.file("README.md", None).await {
        Err(GitHubError::Http { status: 404, .. }) | Ok(None) => {}
        other => panic!("read with another installation's token: {other:?}"),
    }
    let right = Repo {
        gh: &gh,
        installation: 77,
        name: "other/tools",
    };
    let (text, _) = right.file("README.md", None).await.unwrap().unwrap();
    assert_eq!(text, "theirs\n");
}

/// `calls` GETs at once of each installation's repository (`org{i}/r`,
/// installation `100 + i`) while every answer takes 50 ms: every call is
/// answered, and the most the fake answered at once is at `cap` (not under
/// it by a serialisation elsewhere).
async fn burst_stays_at(installations: u64, calls: usize, cap: usize) {
    let (fake, gh) = client().await;
    let gh = std::sync::Arc::new(gh);
    for i in 0..installations {
        fake.ensure_repo(&format!("org{i}/r"));
        fake.set_installation(&format!("org{i}"), 100 + i);
    }
    fake.inject(200, (installations as usize * calls) as u32, None, None, 50);
    let mut all = Vec::new();
    for i in 0..installations {
        for _ in 0..calls {
            let gh = gh.clone();
            all.push(tokio::spawn(async move {
                gh.get(100 + i, &format!("/repos/org{i}/r")).await
            }));
        }
    }
    for call in all {
        call.await
            .unwrap()
            .expect("every call is answered in its turn");
    }
    let most = fake.most_at_once();
    assert!((cap / 2..=cap).contains(&most), "{most} calls at once");
}

/// GitHub refuses more than 100 calls of one client at once (a secondary
/// rate limit), and a service with many operations of one installation asks
/// in bursts: the installation's calls wait their turn instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_one_installation_stays_under_githubs_concurrency_limit() {
    burst_stays_at(1, 150, supervise::github::turns::PER_INSTALLATION).await;
}

/// Each call in flight holds a connection and its answer: the service as a
/// whole keeps a cap too, whatever the number of installations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_many_installations_keeps_the_service_cap() {
    burst_stays_at(10, 20, supervise::github::turns::IN_ALL).await;
}

/// A connection that never answers (one a network dropped without a word)
/// must not keep an installation's turns: each call gives up after
/// `call_timeout`, and a read is asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_never_answer_give_their_turns_back() {
    use supervise::github::turns::PER_INSTALLATION;
    let (fake, mut gh) = client().await;
    gh.call_timeout = std::time::Duration::from_millis(300);
    gh.backoff = std::time::Duration::from_millis(10);
    let gh = std::sync::Arc::new(gh);
    // As many calls hang for a minute as the installation has turns.
    fake.inject(200, PER_INSTALLATION as u32, None, None, 60_000);
    let calls: Vec<_> = (0..=PER_INSTALLATION)
        .map(|_| {
            let gh = gh.clone();
            tokio::spawn(async move { gh.get(7, &format!("/repos/{REPO}")).await })
        })
        .collect();
    tokio::time::timeout(std::time::Duration::from_secs(20), async {
        for call in calls {
            call.await.unwrap().expect("answered when asked again");
        }
    })
    .await
    .expect("the installation's calls waited on calls that never answer");
}

/// A marker counts only in the App's own comments (and issues): planted by
/// a stranger or by a maintainer, a reply marker does not silence the
/// reply, a notice's does not skip the notice, the status table's is not
/// edited as the table, and a labelled issue carrying a unit's marker is
/// not taken for the unit's issue. The App's own are found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_count_only_in_the_apps_own_comments() {
    use supervise::report::posts::{notice_marker, status_marker, unit_marker};
    let (fake, gh) = client().await;
    let repo = repo_of(&gh);
    assert_eq!(
        gh.own_login().await.unwrap(),
        fake_github::APP_LOGIN,
        "from GET /app"
    );
    let markers = [
        "<!-- supervise:reply 1234 -->".to_string(),
        status_marker("op-1"),
        notice_marker("op-1", "blocked-api"),
    ];
    for planter in ["rex", "mia"] {
        for marker in &markers {
            let issue = fake.open_issue(REPO, "a thread");
            let (planted, _) = fake
                .comment(REPO, issue, planter, &format!("+1 {marker}"), false)
                .await;
            assert_eq!(
                repo.marked(issue, None, marker).await.unwrap(),
                None,
                "{planter}: {marker}"
            );
            repo.comment_once(issue, None, marker, "the App's answer")
                .await
                .unwrap();
            repo.upsert_comment(issue, None, marker, "the App's table")
                .await
                .unwrap();
            let comments = fake.comments(REPO, issue);
            let planted_now = comments.iter().find(|c| c.id == planted).unwrap();
            assert_eq!(
                planted_now.body,
                format!("+1 {marker}"),
                "the planted comment was edited"
            );
            let own: Vec<_> = comments
                .iter()
                .filter(|c| c.user == fake_github::APP_LOGIN)
                .collect();
            assert_eq!(own.len(), 1, "{planter}: {marker}: {comments:#?}");
            assert!(own[0].body.contains("the App's table"), "{comments:#?}");
            // And the App's own is found from now on.
            let (id, _) = repo
                .marked(issue, None, marker)
                .await
                .unwrap()
                .expect("found");
            assert_eq!(id, own[0].id);
        }
        let label = "supervise:op-1";
        let issue = fake.open_issue_by(REPO, "api", &unit_marker("op-1", "api"), planter);
        fake.label_issue(REPO, issue, label);
        assert!(
            repo.own_issues_labelled(label).await.unwrap().is_empty(),
            "{planter}"
        );
    }
    let (number, _) = repo
        .create_issue("api", &unit_marker("op-1", "api"), &["supervise:op-1"])
        .await
        .unwrap();
    let own = repo.own_issues_labelled("supervise:op-1").await.unwrap();
    assert_eq!(own.iter().map(|i| i.0).collect::<Vec<_>>(), vec![number]);
}
