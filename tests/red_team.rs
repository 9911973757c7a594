//! Agents are untrusted: stories with agents that attack, against the fake
//! GitHub and the service, each checking that the attack is stopped and that
//! nothing secret got out.

mod story;
mod support;

use story::{Setup, Story, CANARY_KEY, REPO};

const ONE: &str = "# One\n\n| Work Unit | Directory |\n|---|---|\n| solo | solo |\n\n\
## solo\n### Sprint 1: Solo\n- [ ] `solo-sprint-1.txt` exists\n";

/// Every place a secret could end up: comments and issues, pull requests,
/// check runs, the repository's every commit, and the service's database.
fn everything_published(s: &Story) -> String {
    let mut all = String::new();
    for i in s.fake.issues(REPO) {
        all.push_str(&i.title);
        all.push_str(&i.body);
        for c in s.fake.comments(REPO, i.number) {
            all.push_str(&c.body);
        }
    }
    for p in s.fake.pulls(REPO) {
        all.push_str(&p.title);
        all.push_str(&p.body);
    }
    for c in s.fake.check_runs(REPO) {
        all.push_str(&c.title);
        all.push_str(&c.summary);
    }
    let bare = s.tmp.path().join("github/repos/acme/shop.git");
    all.push_str(&support::git(&bare, &["log", "--all", "-p"]));
    for f in ["supervise.db", "supervise.db-wal"] {
        if let Ok(bytes) = std::fs::read(s.tmp.path().join(f)) {
            all.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    all
}

/// An agent that prints its environment (as a crash dump or a debugging
/// step would) and a GitHub token: its output is quoted in the results
/// record, the check run and the retry's evidence, and neither the runner's
/// model key nor the token is found anywhere afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_that_prints_its_environment_publishes_no_secret() {
    let s = Story::start(Setup::operation(ONE, "solo 1 leak,ok")).await;
    s.say("/supervise start").await;
    s.until("the final pull request", 120, |s| s.final_pull().is_some())
        .await;
    let published = everything_published(&s);
    assert!(
        published.contains("could not build"),
        "the failed attempt's output was published (scrubbed), so the check is real"
    );
    for secret in [CANARY_KEY, "ghs_16C7e42F292c6912E7710c838347Ae178B4a"] {
        assert!(!published.contains(secret), "{secret} was published");
    }
}
