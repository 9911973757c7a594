//! `supervise doctor` against the fake GitHub: a repository set up right
//! passes every check, and each planted misconfiguration — the wrong key, the
//! App not installed, a permission or an event missing, a webhook refused,
//! the agent workflow missing or older than the supervisor, no model key,
//! invalid settings, an unreadable plan, the service down — fails its check
//! and names the fix.

mod story;
mod support;

use std::path::Path;
use std::process::Output;
use story::{Story, REPO};

const WORKFLOW: &str = ".github/workflows/supervise-agent.yml";

fn workflow_text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(WORKFLOW)).unwrap()
}

/// Runs `supervise ARGS` with the App's credentials as `serve` reads them,
/// `extra_env` added (off the runtime's threads: the service and the fake
/// answer it from them); its exit status and everything it printed.
async fn with_app(story: &Story, args: &[&str], extra_env: &[(&str, &str)]) -> (i32, String) {
    let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pem");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"));
    cmd.args(args)
        .env("GITHUB_APP_ID", "42")
        .env("GITHUB_PRIVATE_KEY_PATH", key)
        .env("GITHUB_API_URL", story.fake.url())
        .env("GITHUB_WEB_URL", "https://github.example")
        // The release the workflow pins, served here: never github.com.
        .env("SUPERVISE_RELEASE_BASE", release_server("v1"))
        .env_remove("SUPERVISE_PUBLIC_URL");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let out: Output = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `supervise doctor --repo REPO ARGS`.
async fn doctor(story: &Story, extra_env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let mut all = vec!["doctor", "--repo", REPO];
    all.extend_from_slice(args);
    with_app(story, &all, extra_env).await
}

/// The line of `check` and the fix under it.
fn said_of(out: &str, check: &str) -> String {
    let mut lines = out.lines();
    let mut found = String::new();
    while let Some(l) = lines.next() {
        if l[l.find(' ').map_or(0, |i| i + 1)..].starts_with(&format!("{check}:")) {
            found.push_str(l);
            found.push('\n');
            if let Some(next) = lines
                .clone()
                .next()
                .filter(|n| n.trim_start().starts_with('→'))
            {
                found.push_str(next);
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_passes_a_repository_set_up_right_and_names_the_fix_for_each_planted_mistake() {
    let story = Story::begin("").await;
    story.fake.add_file(REPO, WORKFLOW, &workflow_text());
    story.fake.add_secret(REPO, "ANTHROPIC_API_KEY");
    // A comment reaches the service: a delivery GitHub records as answered.
    story.say("Thanks for the plan.").await;
    let service = format!("http://127.0.0.1:{}", story.port);
    let (code, out) = doctor(&story, &[], &["--service-url", &service]).await;
    assert_eq!(code, 0, "{out}");
    eprintln!("{out}");
    for check in [
        "App credentials",
        "Installation",
        "Permissions",
        "Events",
        "Webhook deliveries",
        "Service",
        "Agent workflow",
        "Secrets",
        "Plan",
        "Settings",
        "Agent",
        "Release",
    ] {
        assert!(said_of(&out, check).starts_with('✓'), "{check}:\n{out}");
    }

    // The wrong App id for the key: GitHub refuses the JWT.
    let (code, out) = doctor(&story, &[("GITHUB_APP_ID", "43")], &[]).await;
    assert_eq!(code, 1);
    let s = said_of(&out, "App credentials");
    assert!(
        s.starts_with('✗') && s.contains("generate a new private key"),
        "{out}"
    );
    assert!(said_of(&out, "Installation").starts_with('–'), "{out}");

    // The service down.
    let closed = format!("http://127.0.0.1:{}", support::free_port());
    let (_, out) = doctor(&story, &[], &["--service-url", &closed]).await;
    assert!(said_of(&out, "Service").starts_with('✗'), "{out}");

    // A permission short, an event not subscribed.
    story.fake.set_permission("checks", Some("read"));
    story.fake.drop_event("workflow_run");
    let (code, out) = doctor(&story, &[], &[]).await;
    assert_eq!(code, 1);
    let s = said_of(&out, "Permissions");
    assert!(
        s.contains("checks: write (has read)")
            && s.contains("/settings/apps/sprint-supervisor/permissions"),
        "{out}"
    );
    assert!(said_of(&out, "Events").contains("workflow_run"), "{out}");
    story.fake.set_permission("checks", Some("write"));

    // A webhook refused for its signature.
    story.fake.note_delivery("issue_comment", "bad-secret", 401);
    let (_, out) = doctor(&story, &[], &[]).await;
    assert!(
        said_of(&out, "Webhook deliveries").contains("GITHUB_WEBHOOK_SECRET differs"),
        "{out}"
    );

    // The agent workflow older than the supervisor; no model key.
    let old = workflow_text().replace("      branch:", "      old_branch:");
    story.fake.add_file(REPO, WORKFLOW, &old);
    let (_, out) = doctor(&story, &[], &[]).await;
    assert!(
        said_of(&out, "Agent workflow").contains("lacks the input(s) branch")
            && said_of(&out, "Agent workflow").contains("supervise setup --repo"),
        "{out}"
    );

    // Invalid settings and a plan the reader refuses.
    story
        .fake
        .add_file(REPO, ".github/supervise.yml", "max_parallel: lots\n");
    story.fake.add_file(
        REPO,
        "EXECUTION_PLAN.md",
        "# Nothing to do\n\nJust prose.\n",
    );
    let (_, out) = doctor(&story, &[], &[]).await;
    assert!(said_of(&out, "Settings").starts_with('✗'), "{out}");
    assert!(said_of(&out, "Plan").starts_with('✗'), "{out}");

    // Not installed on the repository: the install link.
    story.fake.uninstall(REPO);
    let (code, out) = doctor(&story, &[], &["--json"]).await;
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let inst = v
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "Installation")
        .unwrap();
    assert_eq!(inst["verdict"], "fail");
    assert!(
        inst["fix"]
            .as_str()
            .unwrap()
            .contains("https://github.example/apps/sprint-supervisor/installations/new"),
        "{inst}"
    );
}

/// `supervise setup --repo REPO`.
async fn setup_repo(story: &Story) -> (i32, String) {
    let args = [
        "setup",
        "--repo",
        REPO,
        "--github-url",
        "https://github.example",
    ];
    with_app(story, &args, &[]).await
}

/// `setup --repo` proposes the agent workflow and starter settings in a pull
/// request — never a push to the default branch — finds its own pull request
/// when asked again, proposes an outdated workflow's update, leaves the
/// repository's own settings alone, and says when there is nothing to do.
/// Not installed, it names the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_opens_one_pull_request_with_the_agent_workflow_and_starter_settings() {
    let story = Story::begin("").await;
    let default_before = story.fake.files(REPO, "main");
    let (code, out) = setup_repo(&story).await;
    assert_eq!(code, 0, "{out}");
    let pulls = story.fake.pulls(REPO);
    assert_eq!(pulls.len(), 1, "{out}");
    let pull = &pulls[0];
    assert_eq!(
        (pull.head.as_str(), pull.base.as_str()),
        ("supervise/setup", "main")
    );
    assert!(
        out.contains(&format!(
            "https://github.example/{REPO}/pull/{}",
            pull.number
        )),
        "{out}"
    );
    assert_eq!(
        story
            .fake
            .file(REPO, "supervise/setup", WORKFLOW)
            .as_deref(),
        Some(workflow_text().as_str())
    );
    let settings = story
        .fake
        .file(REPO, "supervise/setup", ".github/supervise.yml")
        .expect("starter settings proposed");
    supervise::settings::parse(&settings, ".github/supervise.yml").unwrap();
    // The working choice is the default: the agent named in the starter
    // settings, its secret said, and where the workflow gets `supervise`.
    let starter = supervise::place::hosted::starter::STARTER_SETTINGS;
    let parsed = supervise::settings::parse(starter, ".github/supervise.yml").unwrap();
    assert_eq!(parsed.agent.as_deref(), Some("claude"), "{starter}");
    assert!(
        pull.body.contains("`ANTHROPIC_API_KEY`")
            && pull.body.contains("`agent: claude`")
            && pull
                .body
                .contains("release `v1` of `sprint-supervisor/sprint-supervisor`")
            && pull.body.contains("`SUPERVISE_VERSION`"),
        "{}",
        pull.body
    );
    assert_eq!(
        story.fake.files(REPO, "main"),
        default_before,
        "nothing was pushed to the default branch"
    );

    // Asked again: the same pull request, no second one.
    let (code, out) = setup_repo(&story).await;
    assert_eq!(code, 0, "{out}");
    assert_eq!(story.fake.pulls(REPO).len(), 1, "{out}");

    // The repository's own settings and an outdated workflow on the default
    // branch: only the workflow is proposed.
    story
        .fake
        .add_file(REPO, ".github/supervise.yml", "max_parallel: 1\n");
    let old = workflow_text().replace("      branch:", "      old_branch:");
    story.fake.add_file(REPO, WORKFLOW, &old);
    let (code, out) = setup_repo(&story).await;
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(WORKFLOW) && !out.contains("and .github/supervise.yml"),
        "{out}"
    );

    // Everything in place: nothing to propose, and doctor agrees on the workflow.
    story.fake.add_file(REPO, WORKFLOW, &workflow_text());
    let (code, out) = setup_repo(&story).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("nothing to propose"), "{out}");
    let (_, out) = doctor(&story, &[], &[]).await;
    assert!(said_of(&out, "Agent workflow").starts_with('✓'), "{out}");

    // Not installed: the fix, and nothing made.
    story.fake.uninstall(REPO);
    let (code, out) = setup_repo(&story).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not installed on acme/shop"), "{out}");
}

/// `--repo` names a repository, nothing else: a path that would reach
/// another of GitHub's endpoints with the App's credentials, or a bare word,
/// is refused with the form to use, before any request.
#[test]
fn a_repository_that_is_not_owner_slash_name_is_refused_before_any_request() {
    for (cmd, bad) in [
        ("doctor", "a/b/../../app"),
        ("doctor", "shop"),
        ("setup", "acme/.."),
        ("setup", "https://github.com/acme/shop"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"))
            .args([cmd, "--repo", bad, "--app-id", "42"])
            .env("GITHUB_APP_ID", "42")
            // Nothing listens here: a request would fail differently.
            .env("GITHUB_API_URL", "http://127.0.0.1:9")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd} {bad}");
        assert!(
            said.contains("give it as owner/name"),
            "{cmd} {bad}: {said}"
        );
    }
}

/// In a clone whose `origin` is the repository on GitHub, `doctor` needs no
/// `--repo` (as `gh` takes it from the remote); with nothing set it is no
/// usage error but failed checks, each with what to do, under `--json` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_takes_the_repository_from_origin_and_names_what_is_missing() {
    let story = Story::begin("").await;
    let clone = clone_of(&format!("git@github.com:{REPO}.git"));
    // The same findings as with `--repo`: the repository was taken from origin.
    let key = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pem");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"));
    cmd.arg("doctor")
        .current_dir(clone.path())
        .env("GITHUB_APP_ID", "42")
        .env("GITHUB_PRIVATE_KEY_PATH", key)
        .env("GITHUB_API_URL", story.fake.url())
        .env("GITHUB_WEB_URL", "https://github.example")
        .env_remove("SUPERVISE_PUBLIC_URL");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let from_origin = String::from_utf8_lossy(&out.stdout).to_string();
    let (code, with_repo) = doctor(&story, &[], &[]).await;
    assert_eq!(out.status.code(), Some(code), "{from_origin}");
    assert_eq!(from_origin, with_repo);
    let run = |json: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"));
        cmd.arg("doctor")
            .current_dir(std::env::temp_dir())
            .env_remove("GITHUB_APP_ID")
            .env_remove("GITHUB_PRIVATE_KEY")
            .env_remove("GITHUB_PRIVATE_KEY_PATH");
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = run(false);
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{said}");
    for check in ["repository", "App id", "App key"] {
        assert!(said_of(&said, check).contains('→'), "{check}: {said}");
    }
    let out = run(true);
    let findings: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(findings.as_array().map(Vec::len), Some(3), "{findings:#}");
    assert!(findings
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["verdict"] == "fail" && f["fix"].is_string()));
}

/// What a newcomer gets wrong first is said of what they set, with the fix:
/// a key file that is not there is a ✗ line among the others (not an
/// abort), a variable with a bad value is named as the variable (not as the
/// flag clap reads it into), and a busy port for `web` names `--port`.
#[test]
fn mistakes_in_what_was_set_are_said_of_what_was_set() {
    let supervise = || std::process::Command::new(env!("CARGO_BIN_EXE_supervise"));
    let out = supervise()
        .args(["doctor", "--repo", "acme/shop"])
        .env("GITHUB_APP_ID", "42")
        .env_remove("GITHUB_PRIVATE_KEY")
        .env("GITHUB_PRIVATE_KEY_PATH", "/nowhere/app.pem")
        .env("GITHUB_API_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = said_of(&said, "App key");
    assert!(
        key.contains("GITHUB_PRIVATE_KEY_PATH")
            && key.contains("No such file")
            && key.contains('→'),
        "{said}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("error:"),
        "no abort"
    );

    let out = supervise()
        .args(["doctor", "--repo", "acme/shop"])
        .env("GITHUB_APP_ID", "abc")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("GITHUB_APP_ID is `abc`"), "{err}");
    // Typed as a flag, the flag is named, as clap does.
    let out = supervise()
        .args(["doctor", "--repo", "acme/shop", "--app-id", "abc"])
        .env_remove("GITHUB_APP_ID")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        err.contains("--app-id") && !err.contains("GITHUB_APP_ID is"),
        "{err}"
    );

    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("EXECUTION_PLAN.md"),
        "# Shop\n\n## api\n### Sprint 1: Types\n- [ ] `api/types.txt` exists\n",
    )
    .unwrap();
    let out = supervise()
        .args(["web", "--port", &port])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("already in use") && err.contains("--port 0"),
        "{err}"
    );
}

/// An empty clone whose `origin` is `url`.
fn clone_of(url: &str) -> tempfile::TempDir {
    let clone = tempfile::tempdir().unwrap();
    for args in [&["init", "-q"][..], &["remote", "add", "origin", url]] {
        assert!(std::process::Command::new("git")
            .args(args)
            .current_dir(clone.path())
            .status()
            .unwrap()
            .success());
    }
    clone
}

/// A release server for the Release check: it answers `ok` (a version
/// tag) with SHA256SUMS, anything else with 404. Its address is what
/// SUPERVISE_RELEASE_BASE takes.
fn release_server(ok: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 2048];
            let n = conn.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).to_string();
            let found = request.starts_with(&format!("GET /{ok}/SHA256SUMS "));
            let answer = if found {
                "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            };
            let _ = conn.write_all(answer.as_bytes());
        }
    });
    format!("http://{addr}")
}

/// With nothing set, in a clone, `doctor` still checks everything that
/// needs no credential — the plan, the settings, the agent workflow and
/// its version, the agent it would run and the secret that agent needs,
/// the release it installs from — so a newcomer sees all there is to do.
/// An older workflow that would run a script the repository lacks fails.
#[test]
fn doctor_in_a_clone_checks_what_needs_no_credential() {
    let clone = clone_of(&format!("https://github.com/{REPO}.git"));
    std::fs::create_dir_all(clone.path().join(".github/workflows")).unwrap();
    std::fs::write(clone.path().join(WORKFLOW), workflow_text()).unwrap();
    std::fs::write(
        clone.path().join("EXECUTION_PLAN.md"),
        "# Shop\n\n## api\n### Sprint 1: Types\n- [ ] `api/types.txt` exists\n",
    )
    .unwrap();
    std::fs::write(clone.path().join(".github/supervise.yml"), "agent: codex\n").unwrap();
    let run = |base: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"))
            .arg("doctor")
            .current_dir(clone.path())
            .env_remove("GITHUB_APP_ID")
            .env_remove("GITHUB_PRIVATE_KEY")
            .env_remove("GITHUB_PRIVATE_KEY_PATH")
            .env("SUPERVISE_RELEASE_BASE", base)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
        )
    };
    let (code, said) = run(&release_server("v1"));
    assert_eq!(
        code,
        Some(1),
        "the App's id and key are still missing: {said}"
    );
    for (check, mark, words) in [
        ("App id", '✗', "GITHUB_APP_ID"),
        ("Plan", '✓', "1 unit, 1 sprint"),
        ("Settings", '✓', "valid"),
        ("Agent workflow", '✓', "this version's"),
        (
            "Agent",
            '✓',
            "Codex (agent: codex); it needs the repository secret OPENAI_API_KEY",
        ),
        (
            "Release",
            '✓',
            "supervise v1 from the releases of sprint-supervisor/sprint-supervisor",
        ),
    ] {
        let line = said_of(&said, check);
        assert!(
            line.starts_with(mark) && line.contains(words),
            "{check}: {said}"
        );
    }
    // The release the workflow pins is not there: every agent job would fail.
    let (_, said) = run(&release_server("v9"));
    let line = said_of(&said, "Release");
    assert!(
        line.starts_with('✗') && line.contains("SUPERVISE_VERSION"),
        "{said}"
    );
    // An older workflow whose default agent is a script nobody added.
    let old = workflow_text().replace(
        "AGENT_SCRIPT:",
        "AGENT_KIND: ${{ vars.SUPERVISE_AGENT || 'script' }}\n      AGENT_SCRIPT:",
    );
    std::fs::write(clone.path().join(WORKFLOW), old).unwrap();
    let (_, said) = run(&release_server("v1"));
    let line = said_of(&said, "Agent");
    assert!(
        line.starts_with('✗') && line.contains(".github/supervise-agent.sh"),
        "{said}"
    );
    // A local command as `agent:` is no agent the workflow runs.
    std::fs::write(clone.path().join(WORKFLOW), workflow_text()).unwrap();
    std::fs::write(
        clone.path().join(".github/supervise.yml"),
        "agent: ./my-agent.sh\n",
    )
    .unwrap();
    let (_, said) = run(&release_server("v1"));
    let line = said_of(&said, "Agent");
    assert!(
        line.starts_with('✗') && line.contains("command for local runs"),
        "{said}"
    );
}
