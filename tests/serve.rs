//! `supervise serve` end to end: the real binary against the fake GitHub, over
//! real HTTP, with a real SQLite file. Each test is a short story.

mod story;
mod support;

use fake_github::send_webhook;
use std::time::{Duration, Instant};
use story::{Door, Setup, Story, REPO};
use support::SECRET;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintainers_status_is_answered_and_a_readers_start_is_refused() {
    let h = Story::start(Setup::commands_only()).await;
    let (comment, statuses) = h
        .fake
        .comment(REPO, 1, "mia", "/supervise status", false)
        .await;
    assert_eq!(statuses, [202]);
    let replies = h.replies_after(1, 1).await;
    assert!(
        replies[0].starts_with("No operation has been started on this issue yet."),
        "{replies:?}"
    );
    assert!(
        h.fake
            .reactions()
            .iter()
            .any(|(c, content, _)| *c == comment && content == "eyes"),
        "acknowledged with 👀"
    );

    h.fake
        .comment(REPO, 2, "rex", "/supervise start", false)
        .await;
    let replies = h.replies_after(2, 1).await;
    assert_eq!(replies[0].lines().next().unwrap(), "Sorry rex, `/supervise start` needs **write** access to this repository or more; you have **read**.");

    h.fake
        .comment(REPO, 3, "mia", "Let's go.\n/supervise start\n", false)
        .await;
    let replies = h.replies_after(3, 1).await;
    assert!(
        replies[0].starts_with("ERROR: Cannot find `EXECUTION_PLAN.md` on `main`."),
        "a start without a plan says what is missing: {replies:?}"
    );

    h.fake
        .comment(REPO, 4, "mia", "/supervise stauts", false)
        .await;
    let replies = h.replies_after(4, 1).await;
    assert!(
        replies[0].starts_with("`stauts` is not a command. Did you mean `/supervise status`?"),
        "{replies:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_code_blocks_edits_and_bots_do_not_act_twice_or_at_all() {
    let h = Story::start(Setup::commands_only()).await;
    let (_, statuses) = h
        .fake
        .comment(REPO, 1, "mia", "/supervise help", true)
        .await;
    assert_eq!(
        statuses,
        [202, 200],
        "the second hook's copy is a duplicate"
    );
    h.replies_after(1, 1).await;
    let (quoted, _) = h
        .fake
        .comment(
            REPO,
            2,
            "mia",
            "Try this:\n```\n/supervise killall\n```\n> /supervise stop\n",
            false,
        )
        .await;
    h.fake
        .comment(REPO, 3, "renovate[bot]", "/supervise status", false)
        .await;
    assert_eq!(h.fake.edit(quoted, "/supervise killall").await, 202);
    h.settle().await;
    assert_eq!(h.bot_comments(1).len(), 1, "one reply for one comment");
    assert!(
        h.bot_comments(2).is_empty(),
        "code, quotes and edits never act"
    );
    assert!(h.bot_comments(3).is_empty(), "bots are ignored");
    assert!(!h.fake.reactions().iter().any(|(c, _, _)| *c == quoted));
}

/// A delivery's status and attempts in the service's store, found by its
/// id or its dedupe key.
async fn delivery_row(h: &Story, id_or_dedupe: &str) -> (String, i64) {
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&h.db_url).await.unwrap();
    let row: (String, i64) = sqlx::query_as(
        "SELECT status, CAST(attempts AS BIGINT) FROM deliveries WHERE id = $1 OR dedupe = $1",
    )
    .bind(id_or_dedupe)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_needs_nothing_done_is_stored_done_at_intake_and_the_rest_are_queued() {
    let h = Story::start(Setup::commands_only()).await;
    let (chat, statuses) = h
        .fake
        .comment(REPO, 1, "mia", "Looks good to me, thanks!", false)
        .await;
    assert_eq!(statuses, [202], "stored before it is answered");
    let (quoted, _) = h
        .fake
        .comment(REPO, 1, "mia", "> /supervise stop\n\nShould we?", false)
        .await;
    assert_eq!(h.fake.edit(quoted, "/supervise help").await, 202);
    let (command, _) = h
        .fake
        .comment(REPO, 1, "mia", "/supervise help", false)
        .await;
    // A pull request closed; a suite requested, and one completed (it may
    // say how CI went). A pull request pushed to is worked: see
    // `a_pull_request_that_changes_the_plan_gets_the_plan_check`.
    let url = format!("http://127.0.0.1:{}/webhook", h.port);
    let pull = |action: &str| {
        format!(
            r#"{{"action":"{action}","pull_request":{{"number":5,"head":{{"sha":"abc","ref":"feature"}}}},"repository":{{"full_name":"{REPO}"}},"installation":{{"id":1}}}}"#
        )
    };
    let suite = |action: &str| {
        format!(
            r#"{{"action":"{action}","check_suite":{{"head_sha":"abc"}},"repository":{{"full_name":"{REPO}"}},"installation":{{"id":1}}}}"#
        )
    };
    for (event, id, body) in [
        ("pull_request", "pr-closed", pull("closed")),
        ("check_suite", "suite-requested", suite("requested")),
        ("check_suite", "suite-completed", suite("completed")),
    ] {
        assert_eq!(
            send_webhook(&url, event, id, SECRET, body.as_bytes()).await,
            202
        );
    }
    h.replies_after(1, 1).await;
    h.settle().await;
    // Stored done with no attempt: no worker ever claimed them.
    let settled = [
        format!("comment:{chat}:created"),
        format!("comment:{quoted}:created"),
        format!("comment:{quoted}:edited"),
        "pr-closed".into(),
        "suite-requested".into(),
    ];
    for key in settled {
        assert_eq!(
            delivery_row(&h, &key).await,
            ("done".to_string(), 0),
            "{key} needs nothing done"
        );
    }
    // Those that may need something went through a worker, once.
    for key in [
        format!("comment:{command}:created"),
        "suite-completed".into(),
    ] {
        assert_eq!(
            delivery_row(&h, &key).await,
            ("done".to_string(), 1),
            "{key}"
        );
    }
    assert_eq!(h.bot_comments(1).len(), 1, "only the command is answered");
}

async fn raw_post(port: u16, head: &str, body: &[u8]) -> u16 {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let _ = s.write_all(body).await;
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    String::from_utf8_lossy(&buf[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signatures_and_size_are_checked_before_anything_is_stored() {
    let h = Story::start(Setup::commands_only()).await;
    let url = format!("http://127.0.0.1:{}/webhook", h.port);
    let body = br#"{"action":"created","comment":{"id":1,"body":"/supervise status"}}"#;
    assert_eq!(
        send_webhook(&url, "issue_comment", "d-1", "wrong", body).await,
        401
    );
    assert_eq!(
        send_webhook(&url, "issue_comment", "d-2", "old-secret", body).await,
        202,
        "a rotated-out secret still in the list is accepted"
    );
    assert_eq!(
        send_webhook(&url, "push", "d-3", SECRET, b"{}").await,
        202,
        "unknown events are acknowledged"
    );
    let head = format!("POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issue_comment\r\nX-GitHub-Delivery: big\r\nContent-Length: {}\r\n\r\n", 26 * 1024 * 1024);
    assert_eq!(
        raw_post(h.port, &head, b"{").await,
        413,
        "too big, refused from its header"
    );
    let health = raw_post(
        h.port,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"",
    )
    .await;
    assert_eq!(health, 200);
    let ready = raw_post(
        h.port,
        "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"",
    )
    .await;
    assert_eq!(ready, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_waited_out_and_server_errors_retried() {
    let h = Story::start(Setup::commands_only()).await;
    // The first API call is told the window resets in 2 s, then two calls fail with 502.
    h.fake.inject(403, 1, None, Some(2), 0);
    h.fake.inject(502, 2, None, None, 0);
    let start = Instant::now();
    h.fake
        .comment(REPO, 5, "mia", "/supervise status", false)
        .await;
    h.replies_after(5, 1).await;
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "answered only after the reset"
    );
    assert_eq!(
        h.fake.early_calls(),
        0,
        "no request was made before the reset"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_processing_neither_loses_nor_repeats_the_delivery() {
    let mut h = Story::start(Setup::commands_only().lease_secs(2).door(Door::Process)).await;
    // The permission check hangs for 4 s: the service is killed while processing.
    h.fake.inject(200, 1, None, None, 4000);
    let (comment, _) = h
        .fake
        .comment(REPO, 6, "mia", "/supervise help", false)
        .await;
    h.until_on(6, "a worker processing the delivery", 30, |h| {
        h.deliveries_processing() > 0
    })
    .await;
    h.kill_serve();
    assert!(h.bot_comments(6).is_empty());
    h.serve_up().await;
    let replies = h.replies_after(6, 1).await;
    assert!(replies[0].contains("Commands (one per line"));
    h.settle().await;
    assert_eq!(
        h.bot_comments(6).len(),
        1,
        "exactly one reply after the restart"
    );
    assert_eq!(
        h.fake
            .reactions()
            .iter()
            .filter(|(c, _, _)| *c == comment)
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_sets_its_own_permissions_and_bots() {
    let h = Story::start(Setup::commands_only()).await;
    h.fake.add_file(
        REPO,
        ".github/supervise.yml",
        "permissions:\n  status: write\nbots:\n  - renovate[bot]\n",
    );
    h.fake
        .comment(REPO, 1, "rex", "/supervise status", false)
        .await;
    let r = h.replies_after(1, 1).await;
    assert!(
        r[0].starts_with("Sorry rex, `/supervise status` needs **write** access"),
        "{r:?}"
    );
    h.fake
        .comment(REPO, 2, "renovate[bot]", "/supervise status", false)
        .await;
    let r = h.replies_after(2, 1).await;
    assert!(
        r[0].starts_with("No operation has been started"),
        "an allow-listed bot is answered: {r:?}"
    );
    // A broken file does not loosen anything: nothing but help acts, and the reply says where.
    h.fake.add_file(
        REPO,
        ".github/supervise.yml",
        "permissions:\n  stpo: write\n",
    );
    h.fake
        .comment(REPO, 3, "mia", "/supervise start", false)
        .await;
    let r = h.replies_after(3, 1).await;
    assert!(
        r[0].contains("`.github/supervise.yml` is not valid") && r[0].contains("`stpo`"),
        "{r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_comment_gets_at_most_one_reply_and_strangers_none() {
    let h = Story::start(Setup::commands_only()).await;
    h.fake.add_user("odd", "!422", "User");
    // A stranger's forty commands: no reply, no reaction.
    let spam = "/supervise start\n".repeat(40);
    let (stranger_comment, statuses) = h.fake.comment(REPO, 10, "eve", &spam, false).await;
    assert_eq!(statuses, [202]);
    // Several commands from a maintainer: one reply answering each, help once.
    h.fake
        .comment(
            REPO,
            11,
            "mia",
            "/supervise status\n/supervise stauts\n/supervise help\n",
            false,
        )
        .await;
    // More commands than one comment acts on: one reply that says so.
    h.fake
        .comment(REPO, 12, "mia", &"/supervise status\n".repeat(15), false)
        .await;
    // A permission answer that is not a clear grant is a refusal with a reply.
    h.fake
        .comment(REPO, 13, "odd", "/supervise status", false)
        .await;
    let combined = h.replies_after(11, 1).await;
    let capped = h.replies_after(12, 1).await;
    let odd = h.replies_after(13, 1).await;
    h.settle().await;
    assert!(h.bot_comments(10).is_empty(), "a stranger was answered");
    assert!(
        !h.fake
            .reactions()
            .iter()
            .any(|(c, _, _)| *c == stranger_comment),
        "a stranger's comment was reacted to"
    );
    assert_eq!(h.bot_comments(11).len(), 1, "{:?}", h.bot_comments(11));
    let text = &combined[0];
    assert!(
        text.contains("**1.** No operation has been started"),
        "{text}"
    );
    assert!(text.contains("**2.** `stauts` is not a command"), "{text}");
    assert_eq!(text.matches("Commands (one per line").count(), 1, "{text}");
    assert_eq!(h.bot_comments(12).len(), 1);
    assert!(capped[0].contains("**10.**") && !capped[0].contains("**11.**"));
    assert!(
        capped[0].contains("the other 5 were not read"),
        "{}",
        capped[0]
    );
    assert!(
        odd[0].contains("could not check your permission"),
        "{}",
        odd[0]
    );
}

/// A rate-limit window longer than the delivery lease: the worker waiting it
/// out keeps renewing its lease, so no second worker takes the delivery over
/// and the command is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_longer_than_the_lease_still_answers_once() {
    let h = Story::start(Setup::commands_only().lease_secs(1)).await;
    // Every API call in the next 4 s is told to wait for the reset.
    h.fake.inject(403, 1, None, Some(4), 0);
    h.fake
        .comment(REPO, 20, "mia", "/supervise status", false)
        .await;
    h.replies_after(20, 1).await;
    h.settle().await;
    assert_eq!(h.bot_comments(20).len(), 1, "{:?}", h.bot_comments(20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn analyze_evaluate_and_prioritize_answer_with_the_diagnosis_of_the_default_branchs_plan() {
    let h = Story::start(Setup::commands_only()).await;
    h.fake.add_file(
        REPO,
        "EXECUTION_PLAN.md",
        "# Shop\n\n| Work Unit | Dependencies |\n|---|---|\n| core | none |\n| web | core |\n\n\
## core\n### Sprint 1: Define the core types\n- Create `src/types.rs`\n- [ ] `cargo build` passes\n\
## web\n### Sprint 1: Pages\n- Create `web/index.html` (framework TBD)\n- [ ] `web/index.html` exists\n",
    );
    h.fake
        .comment(REPO, 9, "mia", "/supervise analyze", false)
        .await;
    let reply = &h.replies_after(9, 1).await[0];
    assert!(reply.starts_with("## Analysis Complete"), "{reply}");
    assert!(
        reply.contains("| Completeness | NEEDS_WORK | 1 |"),
        "{reply}"
    );
    assert!(reply.contains("<details><summary>The whole report"));
    assert!(reply.contains("**Critical Path**: core → web (length: 2 sprints)"));
    h.fake
        .comment(
            REPO,
            10,
            "mia",
            "/supervise evaluate\n/supervise prioritize",
            false,
        )
        .await;
    let reply = &h.replies_after(10, 1).await[0];
    assert!(
        reply.contains("## Evaluation of `EXECUTION_PLAN.md` on `main`"),
        "{reply}"
    );
    assert!(
        reply.contains("## Priorities of `EXECUTION_PLAN.md` on `main`"),
        "{reply}"
    );
    // A rewrite is proposed in a pull request of its own (evaluate finds
    // nothing to fix in this plan); the default branch's plan is untouched.
    assert!(
        reply.contains("`/supervise evaluate` has nothing to change in `EXECUTION_PLAN.md`."),
        "{reply}"
    );
    let pulls = h.fake.pulls(REPO);
    let heads: Vec<&str> = pulls.iter().map(|p| p.head.as_str()).collect();
    assert_eq!(heads, ["supervise-prioritize/issue-10"], "{reply}");
    assert_eq!(pulls[0].base, "main");
    assert!(reply.contains(&format!("Proposed in pull request #{}.", pulls[0].number)));
    assert!(reply.contains("## Prioritization Complete"));
    let prioritized = h
        .fake
        .file(REPO, &pulls[0].head, "EXECUTION_PLAN.md")
        .unwrap();
    assert!(prioritized.contains("**Priority**: "), "{prioritized}");
    assert!(supervise::plan::parse(&prioritized, "EXECUTION_PLAN.md").is_ok());
    assert!(!h
        .fake
        .file(REPO, "main", "EXECUTION_PLAN.md")
        .unwrap()
        .contains("**Priority**"));
    // `analyze` wrote nothing at all.
    let before_analyze = h.fake.request_log().len();
    h.fake
        .comment(REPO, 11, "mia", "/supervise analyze", false)
        .await;
    h.replies_after(11, 1).await;
    assert!(
        h.fake.request_log()[before_analyze..]
            .iter()
            .all(|(_, e, _)| !e.starts_with("PUT")
                && !e.contains("/git/refs")
                && !e.starts_with("POST /repos/acme/shop/pulls")),
        "the analysis writes nothing to the repository"
    );
}

/// A pull request that breaks the plan gets a failing `supervise: plan` check
/// run with annotations on the lines the reader stops at; one that only makes
/// the plan vaguer gets warnings and does not fail; one that touches no plan
/// gets no check at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pull_request_that_changes_the_plan_gets_the_plan_check() {
    let h = Story::start(Setup::commands_only()).await;
    let good =
        "# Shop\n\n| Work Unit | Dependencies |\n|---|---|\n| core | none |\n| web | core |\n\n\
## core\n### Sprint 1: Define the core types\n- Create `src/types.rs`\n- [ ] `cargo build` passes\n\
## web\n### Sprint 1: Pages\n- Create `web/index.html`\n- [ ] `web/index.html` exists\n";
    h.fake.add_file(REPO, "EXECUTION_PLAN.md", good);
    let plan_check = |s: &Story, branch: &str| {
        let sha = s.fake.branch(REPO, branch)?;
        s.fake
            .check_runs(REPO)
            .into_iter()
            .find(|c| c.head_sha == sha && c.name == "supervise: plan")
    };
    // A cycle: web needs core, core now needs web.
    let broken = good.replace("| core | none |", "| core | web |");
    h.fake
        .propose(
            REPO,
            "mia/cycle",
            &[("EXECUTION_PLAN.md", &broken)],
            "Make core depend on web",
        )
        .await;
    h.until("the plan check on the broken plan", 30, |s| {
        plan_check(s, "mia/cycle").is_some()
    })
    .await;
    let c = plan_check(&h, "mia/cycle").unwrap();
    assert_eq!(c.conclusion.as_deref(), Some("failure"), "{c:#?}");
    assert!(!c.annotations.is_empty());
    for a in &c.annotations {
        assert_eq!(a["path"], "EXECUTION_PLAN.md");
        assert_eq!(a["annotation_level"], "failure");
        assert!(a["start_line"].as_u64().unwrap() >= 1);
    }
    assert!(
        c.annotations
            .iter()
            .any(|a| a["message"].as_str().unwrap().contains("cycle")),
        "{:#?}",
        c.annotations
    );
    // Vaguer, still readable: warnings on the sprint's line, no failure.
    let vague = good.replace(
        "- Create `web/index.html`\n- [ ] `web/index.html` exists",
        "- Make the pages look good (framework TBD)\n- [ ] the pages look good",
    );
    h.fake
        .propose(
            REPO,
            "mia/vague",
            &[("EXECUTION_PLAN.md", &vague)],
            "Loosen the web sprint",
        )
        .await;
    h.until("the plan check on the vague plan", 30, |s| {
        plan_check(s, "mia/vague").is_some()
    })
    .await;
    let c = plan_check(&h, "mia/vague").unwrap();
    assert_ne!(c.conclusion.as_deref(), Some("failure"), "{c:#?}");
    assert!(c
        .annotations
        .iter()
        .any(|a| a["annotation_level"] == "warning" && a["start_line"] == 13));
    // No plan in it: no check.
    h.fake
        .propose(REPO, "mia/readme", &[("README.md", "# Shop\n")], "Docs")
        .await;
    h.settle().await;
    assert!(plan_check(&h, "mia/readme").is_none());
}

/// `/supervise breakdown offline` on an issue: its text becomes the
/// heuristics' plan, proposed as a pull request at once (the default branch
/// untouched), and saying it again after the issue changes updates the same
/// pull request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakdown_on_an_issue_proposes_a_plan_in_a_pull_request() {
    let h = Story::start(Setup::commands_only()).await;
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/requirements/issue.md"),
    )
    .unwrap();
    let issue = h.fake.open_issue_with(REPO, "Workspace invitations", &text);
    h.fake
        .comment(REPO, issue, "mia", "/supervise breakdown offline", false)
        .await;
    let reply = &h.replies_after(issue, 1).await[0];
    assert!(reply.starts_with("## Breakdown Complete"), "{reply}");
    assert!(reply.contains("| Requirements detected | 7 |"), "{reply}");
    let pulls = h.fake.pulls(REPO);
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr = &pulls[0];
    assert_eq!(
        (pr.base.as_str(), pr.head.as_str()),
        (
            "main",
            format!("supervise-breakdown/issue-{issue}").as_str()
        )
    );
    assert!(reply.contains(&format!("pull request #{}", pr.number)));
    let plan = h.fake.file(REPO, &pr.head, "EXECUTION_PLAN.md").unwrap();
    let read = supervise::plan::parse(&plan, "EXECUTION_PLAN.md").expect("the reader accepts it");
    assert_eq!(read.title, "Workspace invitations");
    assert!(
        h.fake.file(REPO, "main", "EXECUTION_PLAN.md").is_none(),
        "nothing pushed to main"
    );
    // Again, from a document on the default branch: the same pull request.
    h.fake.add_file(REPO, "docs/PRD.md", "# Invites\n\n## Tasks\n\n- Add an invite endpoint\n- Add a revoke endpoint\n- Show pending invites\n");
    h.fake
        .comment(
            REPO,
            issue,
            "mia",
            "/supervise breakdown offline docs/PRD.md",
            false,
        )
        .await;
    let replies = h.replies_after(issue, 2).await;
    assert!(
        replies[1].contains(&format!("pull request #{}", pr.number)),
        "{}",
        replies[1]
    );
    assert_eq!(h.fake.pulls(REPO).len(), 1, "updated, not opened again");
    assert!(h
        .fake
        .file(REPO, &pr.head, "docs/EXECUTION_PLAN.md")
        .unwrap()
        .contains("Add a revoke endpoint"));
}

/// GitHub made the reply, and its answer was lost (a 502 after the comment
/// was made), and would be three times over: a write whose outcome is
/// unknown is not sent again blind (four replies), but handed to the
/// look-before-make that finds it made. One reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_whose_answer_is_lost_is_made_once() {
    let h = Story::start(Setup::commands_only()).await;
    h.fake.lose_answers("/issues/21/comments", 3);
    h.fake
        .comment(REPO, 21, "mia", "/supervise status", false)
        .await;
    h.replies_after(21, 1).await;
    // Whatever retries were coming have had their time.
    h.settle().await;
    // The first answer was lost; the look found the reply, so it was
    // never posted again (the two other losses were never reached).
    assert_eq!(h.fake.answers_lost(), 1);
    assert_eq!(h.bot_comments(21).len(), 1, "{:#?}", h.bot_comments(21));
}

/// One account saying thirty commands costs GitHub calls for the first ten
/// only (a burst, then one every few seconds): the rest are dropped before
/// any call, so one person cannot spend the installation's rate limit (1,249
/// commands paused it for an hour). Another person is answered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_commands_from_one_person_costs_a_bounded_number_of_calls() {
    let h = Story::start(Setup::commands_only()).await;
    for i in 0..30 {
        h.fake
            .comment(REPO, 30 + i, "eve", "/supervise status", false)
            .await;
    }
    h.fake
        .comment(REPO, 70, "mia", "/supervise status", false)
        .await;
    h.replies_after(70, 1).await;
    h.settle().await;
    let asked = h
        .fake
        .request_log()
        .iter()
        .filter(|(_, e, _)| e.contains("/permission"))
        .count();
    // eve's burst and mia's one, and a refill or two while the test ran.
    assert!((11..=14).contains(&asked), "{asked} permission look-ups");
}
