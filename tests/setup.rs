//! `supervise setup` in a real browser against the fake GitHub's manifest
//! flow: one button on the local page, GitHub's confirmation, and the App's
//! credentials written where `serve` reads them, readable by their owner
//! only and never printed; `doctor` then finds GitHub accepts the new key.

#[path = "support/browser.rs"]
mod browser;
mod support;

use browser::Browser;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_creates_the_app_in_one_click_and_keeps_its_credentials_private() {
    let fake = support::fake_github(None, None).await;
    let key = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/app/test-app-key.pem"),
    )
    .unwrap();
    fake.set_manifest_key(&key);
    fake.ensure_repo("acme/shop");
    let out_dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_supervise"))
        .args([
            "setup",
            "--webhook-url",
            "https://supervise.example.com/webhook",
        ])
        .args(["--github-url", &fake.url(), "--api-url", &fake.url()])
        .args(["--org", "acme", "--port", "0", "--out-dir"])
        .arg(out_dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://127.0.0.1:"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_string();
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let b = Browser::open().await;
    b.goto(&url).await;
    b.wait_for("the setup page", "#create", 10).await;
    b.shot("setup-start").await;
    let v = b.accessibility_violations().await;
    assert!(v.is_empty(), "{}", v.join("\n"));
    b.click("the one button", "#create", 5).await;
    // GitHub's page: the App it is about to create, for the organisation.
    b.wait_for("GitHub's confirmation", "#app-name", 10).await;
    let confirm = b.text_of("GitHub's confirmation", "main h1", 5).await;
    assert!(confirm.contains("acme"), "{confirm}");
    b.click("Create GitHub App", "#create", 5).await;
    let done = b.text_of("back on the setup page", "main#done", 10).await;
    assert!(done.contains("is created"), "{done}");
    b.close().await;
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    let said = format!("{first}{}", rest.join().unwrap());
    assert!(status.success(), "{said}");
    let env_path = out_dir.path().join("supervise.env");
    let key_path = out_dir.path().join("supervise-app.pem");
    for p in [&env_path, &key_path] {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", p.display());
    }
    assert_eq!(std::fs::read_to_string(&key_path).unwrap(), key);
    let env = std::fs::read_to_string(&env_path).unwrap();
    for line in [
        "GITHUB_APP_ID=42",
        &format!("GITHUB_WEBHOOK_SECRET={}", support::SECRET),
        "GITHUB_CLIENT_ID=Iv1.fakefromamanifest",
        "GITHUB_CLIENT_SECRET=fake-client-secret-from-a-manifest",
    ] {
        assert!(env.contains(line), "{line} missing:\n{env}");
    }
    // Nothing secret on the terminal; the next steps are.
    for secret in [
        support::SECRET,
        "fake-client-secret-from-a-manifest",
        "PRIVATE KEY",
    ] {
        assert!(!said.contains(secret), "printed a secret: {said}");
    }
    assert!(
        said.contains("/installations/new") && said.contains("supervise doctor"),
        "{said}"
    );
    // The key works: GitHub accepts the App's JWT.
    let env_of = |k: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap()
            .to_string()
    };
    let (app_id, key_file) = (env_of("GITHUB_APP_ID"), env_of("GITHUB_PRIVATE_KEY_PATH"));
    let api = fake.url();
    let doctor = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_supervise"))
            .args(["doctor", "--repo", "acme/shop"])
            .env("GITHUB_APP_ID", app_id)
            .env("GITHUB_PRIVATE_KEY_PATH", key_file)
            .env("GITHUB_API_URL", api)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("✓ App credentials"), "{text}");
}
