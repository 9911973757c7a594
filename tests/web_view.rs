//! The web view, looked at in a real browser (headless Chromium over
//! WebDriver): the local page of `supervise web` following `supervise run`,
//! and the service's pages behind GitHub sign-in, against the fake GitHub.
//! Each story saves screenshots in `target/screenshots/` and runs axe-core
//! on what it looked at.

#[path = "support/browser.rs"]
mod browser;
mod story;
mod support;

use browser::Browser;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use story::{Story, PLAN, REPO};
use support::Checkout;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A plain HTTP GET without cookies: what anyone on the network gets.
async fn plain_get(port: u16, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Marks the page so a reload would be seen: a reload loses the mark.
async fn mark(b: &Browser) {
    b.client
        .execute("window.__not_reloaded = 'yes';", vec![])
        .await
        .unwrap();
}

async fn still_marked(b: &Browser) -> bool {
    b.client
        .execute("return window.__not_reloaded || 'reloaded';", vec![])
        .await
        .unwrap()
        == "yes"
}

async fn assert_accessible(b: &Browser, page: &str) {
    let v = b.accessibility_violations().await;
    assert!(v.is_empty(), "axe-core on {page}:\n{}", v.join("\n"));
}

/// `supervise web --port 0` in the checkout; the address it printed.
fn serve_local(repo: &Checkout) -> (Child, String) {
    let mut child = repo
        .cmd(&["web", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    out.read_line(&mut first).unwrap();
    // Keep reading what it prints, so it never writes to a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_page_follows_a_run_live_and_shows_a_blocked_unit() {
    let repo = Checkout::new(
        &[("EXECUTION_PLAN.md", PLAN)],
        "tests/agents/scripted.sh",
        "api 1 slowpriced\ndocs 1 fail\n",
    );
    let (mut web, url) = serve_local(&repo);
    let b = Browser::open().await;
    b.goto(&url).await;
    b.wait_for("the empty list", "p.empty", 10).await;
    // The run starts in another terminal; the list shows it by itself.
    let mut run = repo
        .cmd(&["run", "--quiet", "--budget-usd", "50"])
        .env("AGENT_SLOW", "3")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    mark(&b).await;
    b.wait_for("the operation in the list", "tr[data-op] a", 20)
        .await;
    assert!(still_marked(&b).await, "the list updated without a reload");
    b.shot("local-list").await;
    b.click("the operation's link", "tr[data-op] a", 5).await;
    b.wait_for("the operation page", "#live", 10).await;
    mark(&b).await;
    b.wait_for(
        "api's sprint running",
        "tr[data-unit='api'][data-status='RUNNING']",
        20,
    )
    .await;
    b.wait_for("a running bar", "svg.gantt rect.bar.running", 10)
        .await;
    b.shot("local-running").await;
    b.wait_for(
        "api completed",
        "tr[data-unit='api'][data-status='COMPLETED']",
        60,
    )
    .await;
    let said = b
        .text_of("docs BLOCKED", ".blocked-notice[data-unit='docs']", 60)
        .await;
    assert!(said.contains("BLOCKED: docs"), "{said}");
    // The command as it is typed here, not GitHub's comment.
    assert!(
        said.contains("supervise resume docs") && !said.contains("/supervise"),
        "{said}"
    );
    assert!(
        said.contains("supervise/") && said.contains("/docs/sprint-1"),
        "the branch: {said}"
    );
    assert!(still_marked(&b).await, "every change came without a reload");
    // Retries show on the timeline: docs's bars, one per attempt.
    let bars = b
        .client
        .execute(
            "return document.querySelectorAll(\"svg.gantt g[data-unit='docs'] rect.bar\").length",
            vec![],
        )
        .await
        .unwrap();
    assert!(bars.as_u64().unwrap_or(0) >= 2, "docs's attempts: {bars}");
    assert!(b.has("svg.gantt g.blocked[data-unit='docs']").await);
    // What api's attempt cost, over time, against the budget.
    b.wait_for("the spend's burn-down", "svg.burn", 10).await;
    let burn = b
        .client
        .execute(
            "return document.querySelector('svg.burn title').textContent",
            vec![],
        )
        .await
        .unwrap();
    let burn = burn.as_str().unwrap_or_default();
    assert!(
        burn.contains("Spent $0.0125 of a $50.00 budget over 1 priced attempt"),
        "{burn}"
    );
    assert!(b.has("svg.burn line.budget").await);
    b.shot("local-blocked").await;
    assert_accessible(&b, "the local operation page").await;
    // The JSON API the page stands on: the list, and the operation's units
    // with every attempt.
    let port: u16 = url
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let (status, list) = plain_get(port, "/api/v1/operations").await;
    assert_eq!(status, 200, "{list}");
    let body = |t: &str| -> serde_json::Value {
        serde_json::from_str(t.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap()
    };
    let list = body(&list);
    let op = list["operations"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(list["operations"][0]["blocked_units"][0], "docs", "{list}");
    assert_eq!(list["operations"][0]["usd_spent"], 0.0125, "{list}");
    assert_eq!(list["operations"][0]["usd_budget"], 50.0, "{list}");
    let (status, detail) = plain_get(port, &format!("/api/v1/operations/{op}")).await;
    assert_eq!(status, 200);
    let detail = body(&detail);
    let docs = detail["units"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "docs")
        .unwrap();
    assert_eq!(docs["status"], "BLOCKED");
    let tiers: Vec<&str> = docs["sprints"][0]["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["tier"].as_str().unwrap())
        .collect();
    assert_eq!(tiers.len(), 3, "{detail}");
    assert_ne!(tiers[0], tiers[2], "retries escalate: {tiers:?}");
    let _ = run.wait();
    b.close().await;
    let _ = web.kill();
    let _ = web.wait();
}

/// Signs in on the fake GitHub's authorize page as `login`.
async fn sign_in(b: &Browser, base: &str, login: &str) {
    b.goto(base).await;
    b.click("the sign-in link", "a.button", 10).await;
    let field = b.wait_for("GitHub's authorize page", "#login", 10).await;
    field.send_keys(login).await.unwrap();
    b.wait_for("the authorize button", "#authorize", 5)
        .await
        .click()
        .await
        .unwrap();
    b.wait_for("signed in", "form.who", 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_signed_in_with_github_see_what_they_can_read_live_and_nothing_else() {
    let story = Story::begin("api 1 slow\ndocs 1 fail\n").await;
    story.fake.add_user("eve", "none", "User");
    let base = format!("http://localhost:{}/", story.port);
    let b = Browser::open().await;
    // Unsigned: the sign-in page and nothing else.
    b.goto(&base).await;
    b.wait_for("the sign-in page", "main.signin", 10).await;
    b.shot("github-signin").await;
    assert_accessible(&b, "the sign-in page").await;
    story.say("/supervise start").await;
    sign_in(&b, &base, "mia").await;
    b.wait_for("the operation in the list", "tr[data-op] a", 30)
        .await;
    let op = b
        .attr_of("the operation's row", "tr[data-op]", "data-op", 5)
        .await;
    assert!(!op.is_empty());
    b.shot("github-list").await;
    assert_accessible(&b, "the operations list").await;
    b.click("the operation's link", "tr[data-op] a", 5).await;
    b.wait_for("the operation page", "#live", 10).await;
    mark(&b).await;
    assert!(
        b.text().await.contains(REPO),
        "the page names its repository"
    );
    b.wait_for(
        "api completed",
        "tr[data-unit='api'][data-status='COMPLETED']",
        120,
    )
    .await;
    let said = b
        .text_of("docs BLOCKED", ".blocked-notice[data-unit='docs']", 120)
        .await;
    assert!(
        said.contains("/supervise resume docs"),
        "said as a comment on GitHub: {said}"
    );
    assert!(still_marked(&b).await, "the page followed without a reload");
    // The decision log links each sprint's decisions to its Actions run.
    let run = b
        .attr_of(
            "a run in the decision log",
            "table.log a[href*='/actions/runs/']",
            "href",
            30,
        )
        .await;
    assert!(run.contains("/actions/runs/"), "{run}");
    b.shot("github-operation").await;
    assert_accessible(&b, "the operation page").await;
    // The API the page stands on says the same.
    let (status, body) = plain_get(story.port, "/api/v1/operations").await;
    assert_eq!(status, 401, "the API is for people signed in: {body}");
    // Anyone without a session learns nothing, not even the names.
    for path in ["/", &format!("/ops/{op}")] {
        let (status, body) = plain_get(story.port, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(body.contains("Sign in with GitHub"), "{path}: {body}");
        assert!(
            !body.contains(&op) && !body.contains(REPO),
            "{path} leaks: {body}"
        );
    }
    // Signing out (the form carries its CSRF token), then in as someone
    // without access to the repository: no operation, no name.
    b.click("the sign-out button", "form.who button", 5).await;
    b.wait_for("signed out", "main.signin", 10).await;
    sign_in(&b, &base, "eve").await;
    b.wait_for("the empty list", "p.empty", 10).await;
    assert!(!b.source().await.contains(REPO));
    b.goto(&format!("{base}ops/{op}")).await;
    b.wait_for("the not-found page", "main h1", 10).await;
    let source = b.source().await;
    assert!(source.contains("Not found"), "{source}");
    assert!(
        !source.contains(REPO) && !source.contains("docs"),
        "{source}"
    );
    b.goto(&format!("{base}api/v1/operations/{op}")).await;
    assert!(b
        .text()
        .await
        .contains("no operation here that you may see"));
    b.shot("github-no-access").await;
    b.close().await;
}
